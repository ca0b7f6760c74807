"""``--workload FILE@WHEN``: which file arrives when, on a simulation's clock.

``WHEN`` is seconds after the start (``600``), or a duration with units (``90s``, ``10m``, ``1h30m``,
``2d``). A file named with an ``@`` of its own is taken whole when it exists.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path

from scheduler.ports.sim.builders import ManifestError

_UNITS = {"d": 86400.0, "h": 3600.0, "m": 60.0, "s": 1.0}
_DURATION = re.compile(r"(?:(\d+(?:\.\d+)?)d)?(?:(\d+(?:\.\d+)?)h)?(?:(\d+(?:\.\d+)?)m)?(?:(\d+(?:\.\d+)?)s)?")


@dataclass(frozen=True, slots=True)
class Scheduled:
    """One ``--workload`` argument: the file, and when (seconds after the start) its objects arrive."""

    path: str
    at: float = 0.0


def parse_seconds(text: str, *, what: str) -> float:
    """``600``, ``600s``, ``10m``, ``1h30m``, ``2d`` as seconds; :class:`ManifestError` naming ``what`` if not."""
    text = text.strip()
    try:
        seconds = float(text)
    except ValueError:
        match = _DURATION.fullmatch(text)
        if not text or match is None:
            raise ManifestError(
                f"{what}: {text!r} is not a time; give seconds (600) or a duration such as 90s, 10m, 1h30m"
            ) from None
        seconds = sum(float(part) * unit for part, unit in zip(match.groups(), _UNITS.values(), strict=True) if part)
    if not math.isfinite(seconds):
        raise ManifestError(f"{what}: {text!r} is not a finite number of seconds")
    if seconds < 0:
        raise ManifestError(f"{what}: {text!r} must be zero or more seconds")
    return seconds


def scheduled(value: str) -> Scheduled:
    """``FILE`` or ``FILE@WHEN``."""
    path, at, when = value.rpartition("@")
    if not at or Path(value).exists():
        return Scheduled(value)
    return Scheduled(path, parse_seconds(when, what=f"--workload {value}"))


def clock_text(seconds: float | None) -> str:
    """``0:10:00`` for 600 seconds after the start; ``-`` for never."""
    if seconds is None:
        return "-"
    whole = round(seconds)
    hours, rest = divmod(whole, 3600)
    return f"{hours}:{rest // 60:02d}:{rest % 60:02d}"
