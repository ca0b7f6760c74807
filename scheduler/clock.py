"""Time, injected: the real clock in production, a manual one in tests that must not sleep."""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    def monotonic(self) -> float:
        """Seconds on a clock that never goes back (durations, deadlines)."""
        ...

    def wall(self) -> float:
        """Seconds since the epoch (timestamps written to the API)."""
        ...


class SystemClock:
    def monotonic(self) -> float:
        return time.monotonic()

    def wall(self) -> float:
        return time.time()


class ManualClock:
    """A clock that moves only when told to: ``advance(seconds)``."""

    def __init__(self, start: float = 1_790_000_000.0) -> None:
        self._offset = 0.0
        self._start = start

    def monotonic(self) -> float:
        return self._offset

    def wall(self) -> float:
        return self._start + self._offset

    def advance(self, seconds: float) -> None:
        self._offset += seconds
