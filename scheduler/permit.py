"""Permit: gangs that wait, holding room for members that have not been created yet.

PFN's semantics, improved: a gang whose present members fit but which has fewer members than its
minimum holds a *reservation*: its present members are assumed where they fit, and placeholders shaped
like their siblings are assumed for the missing ones. Every later placement sees that capacity as
taken. When a missing member arrives it takes a placeholder's place (same shape, same node) and, once
none is missing, the gang is permitted and bound whole. If the gang's timeout (plus a jitter drawn
once per attempt) passes first, everything it held is released and it goes back to the queue.

Placeholders may hold at most ``permit.maxReservedShare`` of the cluster's allocatable (per
resource): waiting gangs cannot take the whole cluster and starve or deadlock each other.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass, field

from scheduler.clock import Clock
from scheduler.gangs import GangKey, GangSpec
from scheduler.settings import PermitSettings
from topology import Assignment, GangRequest, Member

PLACEHOLDER = "~placeholder"


def placeholder_key(gang: str, leaf: str, index: int) -> str:
    return f"{PLACEHOLDER}/{gang}/{leaf}/{index}"


def is_placeholder(key: str) -> bool:
    return key.startswith(PLACEHOLDER + "/")


def with_placeholders(spec: GangSpec, request: GangRequest) -> tuple[GangRequest, dict[str, str]]:
    """``request`` with a placeholder member for every member a leaf's minimum still lacks, shaped like
    the leaf's other members (a leaf with none gets none). Returns the request and, for each placeholder
    added, the key of its leaf."""
    leaves: dict[str, str] = {}

    def fill(node: GangRequest) -> GangRequest:
        if not node.is_leaf:
            return GangRequest(
                key=node.key,
                children=tuple(fill(child) for child in node.children),
                min_pods=node.min_pods,
                min_children=node.min_children,
                required=node.required,
                preferred=node.preferred,
            )
        missing = node.min_pods - len(node.pods)
        if missing <= 0 or not node.pods:
            return node
        shape = node.pods[0].shape
        extra = tuple(Member(key=placeholder_key(spec.key, node.key, i), shape=shape) for i in range(missing))
        leaves.update((member.key, node.key) for member in extra)
        return GangRequest(
            key=node.key,
            pods=node.pods + extra,
            min_pods=node.min_pods,
            required=node.required,
            preferred=node.preferred,
        )

    return fill(request), leaves


@dataclass(frozen=True, slots=True)
class Placeholder:
    leaf: str
    assignment: Assignment


@dataclass(slots=True)
class Reservation:
    """Room a waiting gang holds: a placeholder per missing member, until ``deadline``."""

    gang: GangKey
    deadline: float
    missing_at_start: int
    placeholders: dict[str, Placeholder] = field(default_factory=dict)


class Permit:
    def __init__(self, settings: PermitSettings, clock: Clock, rng: random.Random | None = None) -> None:
        self.settings = settings
        self.clock = clock
        self.rng = rng or random.Random(0)
        self.waiting: dict[GangKey, Reservation] = {}

    def hold(self, spec: GangSpec, placeholders: list[Placeholder]) -> Reservation:
        """Start a reservation; the deadline is the gang's timeout plus a jitter drawn now."""
        timeout = spec.timeout.seconds + self.rng.uniform(0, spec.timeout.jitter_seconds)
        reservation = Reservation(
            gang=spec.key,
            deadline=self.clock.monotonic() + timeout,
            missing_at_start=len(placeholders),
            placeholders={placeholder.assignment.pod: placeholder for placeholder in placeholders},
        )
        self.waiting[spec.key] = reservation
        return reservation

    def release(self, gang: GangKey) -> Reservation | None:
        return self.waiting.pop(gang, None)

    def held(self) -> dict[str, int]:
        """Requests held by placeholders of all waiting gangs, per resource."""
        total: dict[str, int] = {}
        for reservation in self.waiting.values():
            for placeholder in reservation.placeholders.values():
                for name, amount in placeholder.assignment.shape.requests:
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

    def expired(self) -> list[Reservation]:
        now = self.clock.monotonic()
        return [reservation for reservation in self.waiting.values() if reservation.deadline <= now]

    def next_deadline(self) -> float | None:
        return min((reservation.deadline for reservation in self.waiting.values()), default=None)


def placeholder_requests(request: GangRequest) -> dict[str, int]:
    """Total requests of the placeholders in a request tree."""
    total: dict[str, int] = {}
    for member in request.members():
        if is_placeholder(member.key):
            for name, amount in member.shape.requests:
                total[name] = total.get(name, 0) + amount
    return total
