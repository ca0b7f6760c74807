"""The cluster as the engine sees it: configured topology levels and node records.

These are plain frozen values, built once per node change by whoever watches the API (the scheduler's
cluster state, a test, the simulator) and handed to :class:`topology.snapshot.Snapshot`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final, Literal

HOSTNAME: Final = "kubernetes.io/hostname"

TaintEffect = Literal["NoSchedule", "PreferNoSchedule", "NoExecute"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Topology:
    """The node label keys that describe the network, from broad to narrow.

    For example ``("topology.kubernetes.io/zone", "example.com/block", "example.com/rack",
    "kubernetes.io/hostname")``. The order is what widening a *preferred* request follows (rack, then
    block, then zone, then the whole cluster). Requests may still name label keys that are not
    levels; those have no broader neighbour to widen to.
    """

    levels: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if len(set(self.levels)) != len(self.levels):
            raise ValueError(f"topology levels must be distinct, got {list(self.levels)}")
        if any(not key for key in self.levels):
            raise ValueError("topology levels must be non-empty node label keys")

    def widening(self, key: str) -> tuple[str, ...]:
        """Label keys to try for a preferred ``key``: the key itself, then each broader level."""
        if key not in self.levels:
            return (key,)
        position = self.levels.index(key)
        return tuple(reversed(self.levels[: position + 1]))


@dataclass(frozen=True, slots=True, kw_only=True)
class Taint:
    key: str
    value: str = ""
    effect: TaintEffect = "NoSchedule"


#: Taints the node lifecycle controller puts on nodes that are cordoned or not Ready. The snapshot
#: adds them itself when a record says so, so that tolerations decide exactly as on a real cluster.
UNSCHEDULABLE_TAINT: Final = Taint(key="node.kubernetes.io/unschedulable", effect="NoSchedule")
NOT_READY_TAINT: Final = Taint(key="node.kubernetes.io/not-ready", effect="NoSchedule")


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeRecord:
    """One node: what placement needs to know about it, with quantities already in base units."""

    name: str
    labels: Mapping[str, str] = field(default_factory=dict)
    allocatable: Mapping[str, int] = field(default_factory=dict)
    taints: tuple[Taint, ...] = ()
    unschedulable: bool = False
    ready: bool = True

    def static_key(self) -> tuple[object, ...]:
        """Everything but allocatable: when this changes, eligibility and domains must be recomputed."""
        return (
            tuple(sorted(self.labels.items())),
            self.taints,
            self.unschedulable,
            self.ready,
        )
