"""A token bucket for API writes: ``rate`` per second on average, up to ``burst`` at once.

kube-scheduler limits its client the same way (QPS and burst), so that a scheduler binding a
thousand-pod gang does not flood the API server and get throttled with 429s for everyone.
"""

from __future__ import annotations

import anyio

from scheduler.clock import Clock


class TokenBucket:
    def __init__(self, rate: float, burst: int, clock: Clock) -> None:
        if rate <= 0 or burst < 1:
            raise ValueError("a token bucket needs a positive rate and a burst of at least 1")
        self.rate = rate
        self.burst = burst
        self.clock = clock
        self._tokens = float(burst)
        self._last = clock.monotonic()

    def _refill(self) -> None:
        now = self.clock.monotonic()
        self._tokens = min(self.burst, self._tokens + (now - self._last) * self.rate)
        self._last = now

    async def take(self) -> None:
        """Wait until one write is allowed, then use it."""
        while True:
            self._refill()
            if self._tokens >= 1:
                self._tokens -= 1
                return
            await anyio.sleep((1 - self._tokens) / self.rate)
