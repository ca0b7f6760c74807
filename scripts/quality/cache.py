"""Replay figures kept on disk, per harness version, so that a baseline is replayed once, not every run.

A baseline's figures depend on the trace, the harness (``scripts/quality``: the replay, the workloads, the
placers) and the queue and loop it runs through, not on Phalanx's placement or reservations. The key is
the harness's source, the trace's contents and ``HARNESS_VERSION``: raise that when a change elsewhere (the
queue's order, its backoff) may move the baselines' figures.
"""

from __future__ import annotations

import hashlib
import json
import os
from functools import cache
from pathlib import Path

#: Raise when a change outside ``scripts/quality`` may change what a baseline's replay measures.
HARNESS_VERSION = 1
_HARNESS = Path(__file__).resolve().parent
_SOURCES = ("replay.py", "baselines.py", "workloads.py", "cache.py")


def _default_folder() -> Path:
    root = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(root) / "phalanx" / "bench-quality"


class ReplayCache:
    """Figures of one replay (a row, a load, a seed, its length) under the harness version they came from."""

    def __init__(self, folder: Path | None = None) -> None:
        self.folder = folder or _default_folder()

    def get(self, trace: str, key: str) -> dict[str, float] | None:
        path = self._path(trace, key)
        try:
            figures = json.loads(path.read_text())
        except (OSError, ValueError):
            return None  # not there, or half written by a run that was stopped: replayed again
        return figures if isinstance(figures, dict) else None

    def put(self, trace: str, key: str, figures: dict[str, float]) -> None:
        path = self._path(trace, key)
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(f".{os.getpid()}.tmp")
        partial.write_text(json.dumps(figures, sort_keys=True))
        partial.replace(path)  # whole or not at all: workers write side by side

    def _path(self, trace: str, key: str) -> Path:
        found = Path(trace).stat()
        return self.folder / _version(trace, found.st_size, found.st_mtime_ns) / f"{key}.json"


@cache
def _version(trace: str, size: int, modified: int) -> str:
    """The harness version: its source, the trace's contents (read once per size and modification)."""
    digest = hashlib.sha256(f"harness {HARNESS_VERSION}\n".encode())
    for name in _SOURCES:
        digest.update((_HARNESS / name).read_bytes())
    digest.update(Path(trace).read_bytes())
    return digest.hexdigest()[:16]
