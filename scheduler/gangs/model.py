"""What every gang source compiles to: a :class:`GangSpec`, or a :class:`GangError` that says why not.

A gang is identified by a :data:`GangKey` of the form ``<source>:<namespace>/<name>`` (for example
``volcano:team-a/llm`` or ``pfn:team-b/train``), unique per source kind. Its placement request is
``topology``'s :class:`~topology.GangRequest` tree; the rest (priority, timeout, the objects it came
from) is what the queue, the permit stage and reporting need.

Expected problems are values: a gang whose spec is wrong, or that waits for an object that does not
exist yet, is a :class:`GangError` naming the object, the field, the value and what would be valid.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import NewType

from topology import GangRequest

GangKey = NewType("GangKey", str)
PodKey = NewType("PodKey", str)


class Source(Enum):
    """Where a gang's definition comes from; the value prefixes its key."""

    PFN = "pfn"
    SCHEDULER_PLUGINS = "scheduler-plugins"
    VOLCANO = "volcano"
    WORKLOAD = "workload"  # scheduling.k8s.io v1alpha1 (Kubernetes 1.35): pod spec.workloadRef
    PODGROUP = "podgroup"  # scheduling.k8s.io PodGroup (1.36+): pod spec.schedulingGroup
    COMPOSITE = "composite"  # scheduling.k8s.io CompositePodGroup
    PHALANX = "phalanx"  # scheduling.phalanx.dev CompositePodGroup
    POD = "pod"  # a plain pod: a gang of one


def gang_key(source: Source, namespace: str, name: str) -> GangKey:
    return GangKey(f"{source.value}:{namespace}/{name}")


def pod_key(namespace: str, name: str) -> PodKey:
    return PodKey(f"{namespace}/{name}")


@dataclass(frozen=True, slots=True, order=True)
class ObjectRef:
    """An API object by group, kind, namespace and name (version-independent, for Events and status)."""

    group: str
    kind: str
    namespace: str
    name: str

    def __str__(self) -> str:
        group = f".{self.group}" if self.group else ""
        return f"{self.kind}{group} {self.namespace}/{self.name}"


class Problem(Enum):
    """What the queue does with a gang that has a :class:`GangError`."""

    #: The spec is wrong; nothing changes until the user fixes an object (Warning Event ``InvalidGang``).
    INVALID = "Invalid"
    #: An object the gang needs does not exist yet; it is picked up as soon as it appears.
    WAITING = "Waiting"


@dataclass(frozen=True, slots=True, kw_only=True)
class GangError:
    """Why a gang cannot be scheduled as it stands. Its pods stay pending with ``message``."""

    key: GangKey
    problem: Problem
    pods: tuple[PodKey, ...]
    subject: ObjectRef
    field: str
    value: object
    message: str
    #: Of a gang whose members wait for something: how many pods it needs, as far as its definition says.
    minimum: int | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Timeout:
    """How long a gang may hold a reservation while members are missing: ``seconds`` plus a jitter
    drawn uniformly from ``[0, jitter_seconds)`` once per scheduling attempt, so that many gangs do not
    time out in lock-step."""

    seconds: float
    jitter_seconds: float


@dataclass(frozen=True, slots=True, kw_only=True)
class GangSpec:
    """A gang ready for the queue: its request tree and what scheduling needs besides placement.

    ``objects`` are the group objects
    the gang came from, root first, for status and Events. ``warnings`` are things to tell the user
    that do not stop scheduling (for example markers of a second gang source that were ignored).
    """

    key: GangKey
    source: Source
    request: GangRequest
    priority: int
    created: float
    timeout: Timeout
    objects: tuple[ObjectRef, ...] = ()
    min_resources: Mapping[str, int] = field(default_factory=dict)
    warnings: tuple[str, ...] = ()
    #: Pods of the gang still held by ``spec.schedulingGates`` (not members yet), and the gates' names.
    gated: int = 0
    gates: tuple[str, ...] = ()

    @property
    def pods(self) -> tuple[PodKey, ...]:
        return tuple(PodKey(member.key) for member in self.request.members())

    @property
    def missing_pods(self) -> int:
        """Members the minimums need that have not been created yet (a reservation may hold room for them)."""
        return sum(max(0, part.min_pods - len(part.pods)) for part in self.request.walk() if part.is_leaf)


GangResult = GangSpec | GangError
