"""Permit: gangs that wait, holding room for members that have not been created yet.

PFN's semantics, improved: a gang whose present members fit but which has fewer members than its
minimum *holds* room (a :class:`Hold`): its present members are assumed where they fit, and placeholders
shaped like their siblings are assumed for the missing ones. Every later placement sees that capacity as
taken. When a missing member arrives it takes a placeholder's place (same shape, same node) and, once
none is missing, the gang is permitted and bound whole. If the gang's timeout (plus a jitter drawn
once per attempt) passes first, everything it held is released and it goes back to the queue.

Permit owns the holds and answers with values: which placeholder each arrival takes
(:meth:`Permit.arrive`), which keys a released gang held (:meth:`Permit.release`). The scheduling cycle
applies those answers to ClusterState, the one place capacity is counted (``stage.py``).

Placeholders may hold at most ``permit.maxReservedShare`` of the cluster's allocatable (per
resource): waiting gangs cannot take the whole cluster and starve or deadlock each other. A gang whose
hold timed out *cools down* before it may hold room again: its own timeout, doubled at each timeout
in a row (jittered, at most ``permit.maxCooldownSeconds``), so that a gang whose missing members never come
(a PodGroup larger than its Job) holds room for a shrinking share of the time, not forever.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace

from scheduler.clock import Clock
from scheduler.gangs import GangKey, GangSpec
from scheduler.settings import PermitSettings
from topology import GangRequest, HeldRoom, PodShape

PLACEHOLDER = "~placeholder"
#: A cool-down is multiplied by a factor drawn from this range, so that gangs timing out together do not
#: hold room together again.
COOLDOWN_JITTER = (0.75, 1.25)


def placeholder_key(gang: str, leaf: str, node: str) -> str:
    """The key of the room a gang holds on one node for members of one leaf (one entry, any count)."""
    return f"{PLACEHOLDER}/{gang}/{leaf}/{node}"


def is_placeholder(key: str) -> bool:
    return key.startswith(PLACEHOLDER + "/")


def with_placeholders(request: GangRequest) -> tuple[GangRequest, int]:
    """``request`` with room asked for every member a leaf's minimum still lacks, shaped like the leaf's
    first member (a leaf with none gets none: nothing says what its pods will need). A count per
    leaf, whatever the gang's size. Returns the request and the number of placeholders."""
    total = 0

    def fill(node: GangRequest) -> GangRequest:
        nonlocal total
        if not node.is_leaf:
            return replace(node, children=tuple(fill(child) for child in node.children))
        missing = node.min_pods - len(node.pods)
        if missing <= 0 or not node.pods:
            return node
        total += missing
        return replace(node, placeholders=missing, placeholder_shape=node.pods[0].shape)

    return fill(request), total


def placeholder_requests(request: GangRequest) -> dict[str, int]:
    """Total requests of the placeholders a request tree asks room for."""
    total: dict[str, int] = {}
    for part in request.walk():
        if part.placeholders and part.placeholder_shape is not None:
            for name, amount in part.placeholder_shape.requests:
                total[name] = total.get(name, 0) + amount * part.placeholders
    return total


@dataclass(frozen=True, slots=True)
class Placeholder:
    """Room held on ``node`` for ``count`` members of the leaf ``leaf`` that do not exist yet."""

    leaf: str
    node: str
    shape: PodShape
    count: int

    @property
    def requests(self) -> dict[str, int]:
        return {name: amount * self.count for name, amount in self.shape.requests}


@dataclass(frozen=True, slots=True)
class Move:
    """A member that arrived takes a placeholder's place on ``node``; ``left`` is what remains of the
    placeholder (None when the member took its last count)."""

    placeholder: str
    member: str
    node: str
    shape: PodShape
    left: Placeholder | None


@dataclass(slots=True)
class Hold:
    """Room a waiting gang holds: placeholders by key, until ``deadline``."""

    gang: GangKey
    deadline: float
    placeholders: dict[str, Placeholder] = field(default_factory=dict)

    @property
    def missing(self) -> int:
        return sum(placeholder.count for placeholder in self.placeholders.values())


class Permit:
    def __init__(self, settings: PermitSettings, clock: Clock, rng: random.Random | None = None) -> None:
        self.settings = settings
        self.clock = clock
        self.rng = rng or random.Random(0)
        self.waiting: dict[GangKey, Hold] = {}
        #: Timeouts in a row of each gang that has not bound since (forgotten when it binds or goes).
        self.timeouts: dict[GangKey, int] = {}
        self._cooling: dict[GangKey, float] = {}  # gang -> when it may hold room again (monotonic)

    def hold(self, spec: GangSpec, rooms: Iterable[HeldRoom]) -> Hold:
        """Hold the room placement set aside (one placeholder per leaf and node); the
        deadline is the gang's timeout plus a jitter drawn now."""
        placeholders: dict[str, Placeholder] = {}
        for room in rooms:
            key = placeholder_key(spec.key, room.part, room.node)
            count = room.count + (placeholders[key].count if key in placeholders else 0)
            placeholders[key] = Placeholder(room.part, room.node, room.shape, count)
        timeout = spec.timeout.seconds + self.rng.uniform(0, spec.timeout.jitter_seconds)
        hold = Hold(
            gang=spec.key,
            deadline=self.clock.monotonic() + timeout,
            placeholders=placeholders,
        )
        self.waiting[spec.key] = hold
        return hold

    def __len__(self) -> int:
        return len(self.waiting)

    def holds(self, gang: GangKey) -> bool:
        """Whether the gang holds room (it waits for members)."""
        return gang in self.waiting

    def hold_of(self, gang: GangKey) -> Hold:
        return self.waiting[gang]

    def arrive(self, gang: GangKey, arrivals: Iterable[tuple[str, str, PodShape]]) -> list[Move] | None:
        """Members that arrived, as (pod, leaf, shape), each take a placeholder of their leaf and shape, in
        the order placement filled them. None, changing nothing, when one of them matches none: the
        gang is not what the hold was made for, and must be placed again."""
        hold = self.waiting[gang]
        slots: dict[tuple[str, PodShape], list[str]] = {}
        for key, held in reversed(hold.placeholders.items()):  # reversed: taken from the end
            slots.setdefault((held.leaf, held.shape), []).append(key)
        left = {key: held.count for key, held in hold.placeholders.items()}
        taken: list[tuple[str, str, PodShape]] = []
        for pod, leaf, shape in arrivals:
            keys = slots.get((leaf, shape), [])
            while keys and not left[keys[-1]]:
                keys.pop()
            if not keys:
                return None
            left[keys[-1]] -= 1
            taken.append((keys[-1], pod, shape))
        moves = []
        for key, pod, shape in taken:
            held = hold.placeholders[key]
            remaining = replace(held, count=held.count - 1) if held.count > 1 else None
            if remaining is None:
                del hold.placeholders[key]
            else:
                hold.placeholders[key] = remaining
            moves.append(Move(placeholder=key, member=pod, node=held.node, shape=shape, left=remaining))
        return moves

    def release(self, gang: GangKey) -> list[str]:
        """End a gang's hold (complete, timed out or void); returns the placeholder keys it held."""
        hold = self.waiting.pop(gang, None)
        return list(hold.placeholders) if hold is not None else []

    def release_all(self) -> list[str]:
        """End every hold, and forget every cool-down (on losing leadership: the next lead starts
        afresh); returns the placeholder keys they held."""
        self.timeouts.clear()
        self._cooling.clear()
        return [key for gang in list(self.waiting) for key in self.release(gang)]

    def held_by_others(self, gang: GangKey) -> dict[GangKey, list[Placeholder]]:
        """The placeholders of every waiting gang but ``gang``."""
        return {
            other: list(hold.placeholders.values())
            for other, hold in self.waiting.items()
            if other != gang and hold.placeholders
        }

    def held(self) -> dict[str, int]:
        """Requests held by placeholders of all waiting gangs, per resource."""
        total: dict[str, int] = {}
        for hold in self.waiting.values():
            for placeholder in hold.placeholders.values():
                for name, amount in placeholder.requests.items():
                    total[name] = total.get(name, 0) + amount
        return total

    def can_hold(self, extra: Mapping[str, int], allocatable: Mapping[str, int]) -> bool:
        """Whether ``extra`` placeholder requests keep every resource within the reserved share."""
        held = self.held()
        share = self.settings.max_reserved_share
        return all(
            held.get(name, 0) + amount <= share * allocatable.get(name, 0)
            for name, amount in extra.items()
            if name != "pods"
        )

    def expired(self) -> list[Hold]:
        now = self.clock.monotonic()
        return [hold for hold in self.waiting.values() if hold.deadline <= now]

    def timed_out(self, gang: GangKey, timeout_seconds: float) -> float:
        """The gang's hold timed out (release it separately): it cools down before it may hold room
        again. Returns the seconds it cools down."""
        count = self.timeouts.get(gang, 0) + 1
        self.timeouts[gang] = count
        growth: float = 2.0 ** min(count - 1, 62)
        cap = self.settings.max_cooldown_seconds
        delay = min(max(timeout_seconds, 1.0) * growth * self.rng.uniform(*COOLDOWN_JITTER), cap)
        self._cooling[gang] = self.clock.monotonic() + delay
        return delay

    def cooling(self, gang: GangKey) -> float | None:
        """Seconds until the gang may hold room again, or None when it may now."""
        until = self._cooling.get(gang)
        if until is None:
            return None
        left = until - self.clock.monotonic()
        return left if left > 0 else None

    def cooled(self) -> list[GangKey]:
        """Gangs whose cool-down has just ended (each told once): they may hold room again."""
        now = self.clock.monotonic()
        done = [gang for gang, until in self._cooling.items() if until <= now]
        for gang in done:
            del self._cooling[gang]
        return done

    def clear_timeouts(self, gang: GangKey) -> None:
        """The gang bound, or is gone: its timeouts no longer count."""
        self.timeouts.pop(gang, None)
        self._cooling.pop(gang, None)

    def next_deadline(self) -> float | None:
        """When the next hold times out or cool-down ends."""
        deadlines = [hold.deadline for hold in self.waiting.values()]
        return min((*deadlines, *self._cooling.values()), default=None)
