"""A token bucket for API writes: ``rate`` per second on average, up to ``burst`` at once.

kube-scheduler limits its client the same way (QPS and burst), so that a scheduler binding a
thousand-pod gang does not flood the API server and get throttled with 429s for everyone.

A write that finds the bucket empty reserves the next token and sleeps once, until that token is due
(as client-go's limiter and Go's ``rate.Limiter.Wait`` do). Waiting writes are served in the order they
asked, and a thousand of them cost a thousand sleeps, not a thousand wake-ups at every token.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

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

    async def take(self) -> None:
        """Wait until one write is allowed, then use it."""
        self._refill()
        self._tokens -= 1
        if self._tokens >= 0:
            return
        try:
            await self._sleep(-self._tokens / self.rate)
        except BaseException:
            self._tokens += 1  # cancelled while waiting: its token goes to the next write
            raise
