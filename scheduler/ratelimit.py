"""Limits on API writes: how many per second (``TokenBucket``) and how many in flight (``Slots``).

The token bucket allows ``rate`` writes per second on average, up to ``burst`` at once. kube-scheduler
limits its client the same way (QPS and burst), so that a scheduler binding a thousand-pod gang does not
flood the API server and get throttled with 429s for everyone. A write that finds the bucket empty
reserves the next token and sleeps once, until that token is due (as client-go's limiter and Go's
``rate.Limiter.Wait`` do). Waiting writes are served in the order they asked, and a thousand of them
cost a thousand sleeps, not a thousand wake-ups at every token.

Both let a batch (a gang's binds, sent together) take what it needs at once: taking one at a time, two
batches could each hold part of the slots and wait forever for the rest.
"""

from __future__ import annotations

from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import anyio

from scheduler.clock import Clock


class TokenBucket:
    def __init__(
        self, rate: float, burst: int, clock: Clock, sleep: Callable[[float], Awaitable[None]] = anyio.sleep
    ) -> None:
        if rate <= 0 or burst < 1:
            raise ValueError("a token bucket needs a positive rate and a burst of at least 1")
        self.rate = rate
        self.burst = burst
        self.clock = clock
        self._sleep = sleep
        self._tokens = float(burst)  # below zero: tokens reserved by writes that wait for them
        self._last = clock.monotonic()

    def _refill(self) -> None:
        now = self.clock.monotonic()
        self._tokens = min(self.burst, self._tokens + (now - self._last) * self.rate)
        self._last = now

    async def take(self, count: int = 1) -> None:
        """Wait until ``count`` writes are allowed, then use them (more than ``burst`` wait for the rest)."""
        self._refill()
        self._tokens -= count
        if self._tokens >= 0:
            return
        try:
            await self._sleep(-self._tokens / self.rate)
        except BaseException:
            self._tokens += count  # cancelled while waiting: its tokens go to the next writes
            raise


class Slots:
    """At most ``total`` writes in flight. A batch takes its slots together (no more than ``total``), in the
    order batches asked: a large one is not passed forever by small ones."""

    def __init__(self, total: int) -> None:
        if total < 1:
            raise ValueError("slots need a total of at least 1")
        self.total = total
        self.free = total
        self._waiting: deque[tuple[int, anyio.Event]] = deque()

    @asynccontextmanager
    async def taken(self, count: int = 1) -> AsyncIterator[None]:
        """Hold ``count`` slots (at most :attr:`total`) while the block runs."""
        count = min(count, self.total)
        if self._waiting or self.free < count:
            turn = (count, anyio.Event())
            self._waiting.append(turn)
            try:
                await turn[1].wait()
            except BaseException:
                if turn[1].is_set():  # given its slots as it was cancelled: they go to the next batch
                    self._give_back(count)
                else:
                    self._waiting.remove(turn)
                    self._give_back(0)  # a smaller batch behind this one may fit now
                raise
        else:
            self.free -= count
        try:
            yield
        finally:
            self._give_back(count)

    def _give_back(self, count: int) -> None:
        self.free += count
        while self._waiting and self._waiting[0][0] <= self.free:
            count, turn = self._waiting.popleft()
            self.free -= count
            turn.set()
