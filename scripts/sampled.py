"""Run ``phalanx`` with a sampling profiler counting CPU time, and write what it found to the file named first:
``sampled.py OUT ARGS...``.

Every millisecond of the process's CPU time (``ITIMER_PROF``) the running Python stack is sampled: each
function's share of the samples in which it is on the stack (inclusive) and on top (its own). Unlike
cProfile, which about doubles the CPU of code made of many small calls and so inflates exactly those, a
sample costs the same wherever it lands. A signal is handled between two Python instructions, so time in a
long C call (a JSON parse, a poll) is counted to the Python code that follows it.

Besides, a few entry points of the engine are counted exactly: their calls and the CPU spent inside them
(applying an event, compiling the gangs events touched, compiling one gang, one scheduling cycle).
"""

from __future__ import annotations

import collections
import functools
import signal
import sys
import time
from collections.abc import Callable
from types import FrameType
from typing import Any

from scheduler.cycle import Cycle
from scheduler.frontends.cli import main
from scheduler.gangs.compiler import GangCompiler
from scheduler.gangs.index import GangIndex
from scheduler.state import ClusterState

ENTRY_POINTS = (
    (ClusterState, "apply"),
    (GangIndex, "take_changed"),
    (GangCompiler, "compile"),
    (Cycle, "once"),
)

INTERVAL_S = 0.001


def _where(frame: FrameType) -> str:
    code = frame.f_code
    if code.co_filename == "<string>" and frame.f_back is not None:  # a dataclass's generated method
        return f"{_where(frame.f_back)}>{code.co_name}"
    return f"{code.co_filename.rsplit('/', 1)[-1]}:{code.co_name}"


def counted(owner: type, name: str, spent: collections.Counter[str], calls: collections.Counter[str]) -> None:
    """Replace ``owner.name`` by a wrapper that adds each call's CPU time to ``spent``."""
    function: Callable[..., Any] = getattr(owner, name)
    label = f"{owner.__name__}.{name}"

    @functools.wraps(function)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        began = time.process_time()
        try:
            return function(*args, **kwargs)
        finally:
            spent[label] += time.process_time() - began
            calls[label] += 1

    setattr(owner, name, wrapper)


def sample(out: str, args: list[str]) -> int:
    inclusive: collections.Counter[str] = collections.Counter()
    own: collections.Counter[str] = collections.Counter()
    taken = [0]

    def take(_signal: int, frame: FrameType | None) -> None:
        taken[0] += 1
        if frame is None:
            return
        own[_where(frame)] += 1
        seen = set()
        while frame is not None:
            name = _where(frame)
            if name not in seen:
                seen.add(name)
                inclusive[name] += 1
            frame = frame.f_back

    spent: collections.Counter[str] = collections.Counter()
    calls: collections.Counter[str] = collections.Counter()
    for owner, name in ENTRY_POINTS:
        counted(owner, name, spent, calls)
    signal.signal(signal.SIGPROF, take)
    signal.setitimer(signal.ITIMER_PROF, INTERVAL_S, INTERVAL_S)
    try:
        return main(args)
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0, 0)
        total = max(1, taken[0])
        with open(out, "w") as stream:
            stream.write(f"process CPU: {time.process_time():.3f} s\n\nentry points (CPU inside, calls)\n")
            for label, seconds in spent.most_common():
                stream.write(f"{seconds * 1000:8.1f} ms {calls[label]:7}  {label}\n")
            stream.write(f"\nsamples: {total} (one per {INTERVAL_S * 1000:.0f} ms of CPU)\n\nown\n")
            for name, count in own.most_common(40):
                stream.write(f"{100 * count / total:6.1f}%  {name}\n")
            stream.write("\ninclusive\n")
            for name, count in inclusive.most_common(80):
                stream.write(f"{100 * count / total:6.1f}%  {name}\n")


if __name__ == "__main__":
    sys.exit(sample(sys.argv[1], sys.argv[2:]))
