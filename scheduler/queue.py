"""GangQueue: which gang the scheduling cycle tries next, and when a failed gang is tried again.

Three sub-queues, as in kube-scheduler:

- **active**: ready now, ordered by :func:`order` (priority, then creation time, then key);
- **backoff**: failed, waiting out an exponential backoff with jitter (initial and maximum from
  settings) before being tried again;
- a gang in backoff is moved to active *early* only by a cluster event that could change its answer,
  recorded against why it failed (:class:`Wake`): nodes were added or changed, or capacity was freed on
  a node where a pod of one of its shapes now fits. Events that cannot help leave it alone, so a
  cluster with thousands of waiting gangs is not re-evaluated on every pod event.
- freed capacity wakes, per shape and in queue order, the gangs whose pods the freed room can hold,
  plus the first one it cannot hold alone (the freed room may complete what was free before). When
  one GPU frees up, one of the hundreds of single-GPU jobs waiting for it is tried, not all of them:
  no requeue storms. The others keep their backoff and the next event.

A gang whose definition changes (a member added, its group object edited) is re-added to active at
once by whoever notices; the queue only orders.

Everything takes the time from an injected clock; nothing here sleeps.
"""

from __future__ import annotations

import bisect
import heapq
import random
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum

from scheduler.clock import Clock
from scheduler.decision import Wake
from scheduler.gangs import GangKey
from scheduler.settings import QueueSettings
from topology import PodShape

#: Backoff is multiplied by a factor drawn from this range, so that gangs failing together do not
#: come back together.
JITTER = (0.75, 1.25)


def order(priority: int, created: float, key: GangKey) -> tuple[int, float, GangKey]:
    """Higher priority first, then older first, then by key (deterministic)."""
    return -priority, created, key


class State(Enum):
    """Where a gang is in the queue."""

    ACTIVE = "active"  # ready: in the active heap
    POPPED = "popped"  # handed to a scheduling cycle
    BINDING = "binding"  # placed and being bound: aside, but its failures still count
    BACKOFF = "backoff"  # failed: waiting out its backoff, or an event that could help


@dataclass(slots=True)
class _Entry:
    key: GangKey
    priority: int
    created: float
    attempts: int = 0
    until: float = 0.0
    wake: Wake = field(default_factory=Wake)
    state: State = State.ACTIVE
    version: int = 0  # bumps on every move, so stale heap entries are skipped
    #: Its place in the queue's order when it was indexed by shape (priority and creation may change after).
    indexed: tuple[int, float, GangKey] | None = None


class GangQueue:
    def __init__(self, settings: QueueSettings, clock: Clock, rng: random.Random | None = None) -> None:
        self.settings = settings
        self.clock = clock
        self.rng = rng or random.Random(0)
        self._entries: dict[GangKey, _Entry] = {}
        self._active: list[tuple[tuple[int, float, GangKey], int, GangKey]] = []
        self._backoff: list[tuple[float, int, GangKey]] = []
        #: Gangs backing off, per shape they wait for room for, in the queue's order: freed room wakes the
        #: first few, which must not cost a pass over a backlog of thousands (each pod that ends frees room).
        self._by_shape: dict[PodShape, list[tuple[tuple[int, float, GangKey], GangKey]]] = {}
        #: Gangs per state, for the queue-depth gauge of every sync.
        self._counts: Counter[State] = Counter()

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: object) -> bool:
        return key in self._entries

    def add(self, key: GangKey, priority: int, created: float) -> None:
        """Make the gang ready now (new, or its definition changed). Keeps its failure count."""
        entry = self._entries.get(key)
        if entry is None:
            entry = self._entries[key] = _Entry(key, priority, created)
            self._counts[entry.state] += 1
        entry.priority, entry.created = priority, created
        self._activate(entry)

    def remove(self, key: GangKey) -> None:
        entry = self._entries.pop(key, None)
        if entry is not None:
            self._unindex(entry)
            self._counts[entry.state] -= 1

    def done(self, key: GangKey) -> None:
        """The gang needs nothing more (fully placed): forget it and its failures."""
        self.remove(key)

    def binding(self, key: GangKey) -> None:
        """The gang was placed and is being bound: out of the way, but known, so that a refused bind counts
        as one more failure (:meth:`failed`) and its backoff grows. Its binding shows up as a change of the
        gang, which ends this (:meth:`done`, or :meth:`add` when members were lost)."""
        entry = self._entries.get(key)
        if entry is not None:
            self._unindex(entry)
            self._move(entry, State.BINDING)
            entry.version += 1

    def failed(self, key: GangKey, wake: Wake, *, at_most: float | None = None) -> float:
        """Back the gang off after a failed attempt; returns the backoff in seconds. ``at_most`` ends it
        sooner, when something is due for the gang by then (it may reserve room once it has waited long)."""
        entry = self._entries.get(key)
        if entry is None:
            return 0.0
        entry.attempts += 1
        growth: float = 2.0 ** min(entry.attempts - 1, 62)  # a gang may fail forever; the float may not
        base = min(self.settings.initial_backoff_seconds * growth, self.settings.max_backoff_seconds)
        delay = min(base * self.rng.uniform(*JITTER), self.settings.max_backoff_seconds)
        if at_most is not None:
            delay = max(0.0, min(delay, at_most))
        self._unindex(entry)
        self._move(entry, State.BACKOFF)
        entry.until, entry.wake = self.clock.monotonic() + delay, wake
        entry.version += 1
        heapq.heappush(self._backoff, (entry.until, entry.version, key))
        entry.indexed = order(entry.priority, entry.created, key)
        for shape in wake.shapes:
            bisect.insort(self._by_shape.setdefault(shape, []), (entry.indexed, key))
        return delay

    def pop(self) -> GangKey | None:
        """The best ready gang (removed from active; it stays known until done, failed or removed)."""
        self._expire_backoffs()
        while self._active:
            _, version, key = heapq.heappop(self._active)
            entry = self._entries.get(key)
            if entry is not None and entry.version == version and entry.state is State.ACTIVE:
                self._move(entry, State.POPPED)
                return key
        return None

    def wake(self, key: GangKey) -> bool:
        """Something that may help this one gang happened: end its backoff now. False when it is not
        backing off (ready already, being tried or bound, or unknown)."""
        entry = self._entries.get(key)
        if entry is None or entry.state is not State.BACKOFF:
            return False
        self._activate(entry)
        return True

    def wake_nodes(self) -> int:
        """Nodes were added or changed: every gang waiting on nodes becomes ready. Returns how many."""
        woken = [entry for entry in self._entries.values() if entry.state is State.BACKOFF and entry.wake.nodes]
        for entry in woken:
            self._activate(entry)
        return len(woken)

    def wake_capacity(self, room: Callable[[PodShape], int], *, above: int | None = None) -> int:
        """Capacity was freed: ``room(shape)`` says how many pods of a shape the freed nodes now hold
        (asked once per distinct shape, not once per gang). Wakes, in queue order, the gangs waiting
        for that shape that the room holds, and the first one it does not; only those of priority
        ``above`` or higher when given. Returns how many woke."""
        woken: dict[GangKey, _Entry] = {}  # in order, each once
        for shape, waiting in list(self._by_shape.items()):
            budget = room(shape) if waiting else 0
            beyond = False
            for rank, key in waiting:  # in the queue's order: the first few are what the room is for
                if budget <= 0 or (above is not None and -rank[0] <= above):
                    break  # out of room, or down to gangs not above ``above`` (the order is by priority first)
                entry = self._entries.get(key)
                if entry is None or entry.state is not State.BACKOFF or key in woken:
                    continue  # (a gang waiting for two shapes, woken for the other one)
                if entry.wake.pods <= budget:
                    budget -= entry.wake.pods
                elif beyond:
                    continue
                else:
                    beyond = True  # too big for the freed room alone; with what was free before, maybe
                woken[key] = entry
        for entry in woken.values():
            self._activate(entry)
        return len(woken)

    def next_ready(self) -> float | None:
        """When the earliest backoff ends (monotonic seconds), or None."""
        while self._backoff:
            until, version, key = self._backoff[0]
            entry = self._entries.get(key)
            if entry is not None and entry.version == version and entry.state is State.BACKOFF:
                return until
            heapq.heappop(self._backoff)
        return None

    def lineup(self) -> list[tuple[GangKey, State, float]]:
        """Every gang in the queue in the order it is tried (each with where it is, and the end of its
        backoff, monotonic): what the live view shows as queue positions. O(n log n)."""
        entries = sorted(self._entries.values(), key=lambda entry: order(entry.priority, entry.created, entry.key))
        return [(entry.key, entry.state, entry.until) for entry in entries]

    def depth(self) -> dict[str, int]:
        counts = self._counts
        return {
            "active": counts[State.ACTIVE],
            "backoff": counts[State.BACKOFF],
            "in_flight": counts[State.POPPED] + counts[State.BINDING],
        }

    def _expire_backoffs(self) -> None:
        now = self.clock.monotonic()
        while self._backoff and self._backoff[0][0] <= now:
            _, version, key = heapq.heappop(self._backoff)
            entry = self._entries.get(key)
            if entry is not None and entry.version == version and entry.state is State.BACKOFF:
                self._activate(entry)

    def _move(self, entry: _Entry, state: State) -> None:
        self._counts[entry.state] -= 1
        self._counts[state] += 1
        entry.state = state

    def _activate(self, entry: _Entry) -> None:
        self._unindex(entry)
        self._move(entry, State.ACTIVE)
        entry.version += 1
        heapq.heappush(self._active, (order(entry.priority, entry.created, entry.key), entry.version, entry.key))

    def _unindex(self, entry: _Entry) -> None:
        if entry.indexed is None:
            return
        item = (entry.indexed, entry.key)
        entry.indexed = None
        for shape in entry.wake.shapes:
            waiting = self._by_shape.get(shape)
            if waiting is None:
                continue
            at = bisect.bisect_left(waiting, item)
            if at < len(waiting) and waiting[at] == item:
                del waiting[at]
            if not waiting:
                del self._by_shape[shape]
