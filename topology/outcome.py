"""What :func:`topology.place` answers: a :class:`Placement` or an :class:`Infeasible`.

Both are values, not exceptions: a gang that does not fit is an expected outcome, and the scheduler
turns it into a pending condition and an Event with :attr:`Infeasible.message` as the text.
"""

from __future__ import annotations

from dataclasses import dataclass

from topology.request import PodShape


@dataclass(frozen=True, slots=True, kw_only=True)
class Assignment:
    pod: str
    node: str
    shape: PodShape


@dataclass(frozen=True, slots=True, kw_only=True)
class HeldRoom:
    """Room placed for ``count`` placeholders of the leaf ``part`` on one node (see ``GangRequest.placeholders``)."""

    part: str
    node: str
    shape: PodShape
    count: int


@dataclass(frozen=True, slots=True, kw_only=True)
class DomainChoice:
    """The domain a part of the gang was confined to: ``gang`` is the part's key."""

    gang: str
    key: str
    value: str
    required: bool


@dataclass(frozen=True, slots=True, kw_only=True)
class Placement:
    """Where every placed pod goes. ``unplaced`` lists members beyond the minimums that did not fit
    (they stay pending and are placed later, inside the same domains when those are required).
    ``held`` is the room placed for placeholders, per leaf and node."""

    gang: str
    assignments: tuple[Assignment, ...]
    held: tuple[HeldRoom, ...] = ()
    domains: tuple[DomainChoice, ...] = ()
    unplaced: tuple[str, ...] = ()
    tries: int = 0
    pruned: int = 0

    def nodes(self) -> dict[str, str]:
        """Pod key to node name."""
        return {assignment.pod: assignment.node for assignment in self.assignments}

    def domain_of(self, gang: str) -> dict[str, str]:
        """Label key to value for each domain the part ``gang`` was confined to."""
        return {choice.key: choice.value for choice in self.domains if choice.gang == gang}


@dataclass(frozen=True, slots=True, kw_only=True)
class Infeasible:
    """Why a gang cannot be placed now, in kube-scheduler's words plus the gang-level reason.

    ``node_reasons`` counts, for the pod shape that could not be placed, the nodes that cannot take
    even one such pod, per reason (a node short of both cpu and memory counts under both, as in
    kube-scheduler). ``available`` nodes could take at least one.
    """

    gang: str
    reason: str
    node_reasons: tuple[tuple[str, int], ...] = ()
    available: int = 0
    total: int = 0
    tries: int = 0
    pruned: int = 0
    #: True when waiting cannot help without a change to the gang or to node labels (for example a
    #: topology key that no node carries): the queue may back off longer.
    unresolvable: bool = False

    @property
    def message(self) -> str:
        """``"0/512 nodes are available: 300 Insufficient nvidia.com/gpu, .... Gang ... fits 12."``"""
        summary = f"{self.available}/{self.total} nodes are available"
        if self.node_reasons:
            summary += ": " + ", ".join(f"{count} {reason}" for reason, count in self.node_reasons)
        return f"{summary}. {self.reason}"
