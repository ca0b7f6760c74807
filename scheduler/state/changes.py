"""What the appliers saw change that may wake gangs which failed for lack of room."""

from __future__ import annotations


class Changes:
    """Nodes where room was freed, and whether the node set or the nodes' labels changed, since the loop
    last took them (``ClusterState.take_signals``)."""

    __slots__ = ("freed", "nodes_changed")

    def __init__(self) -> None:
        self.freed: set[str] = set()
        self.nodes_changed = False

    def take(self) -> tuple[set[str], bool]:
        freed, changed = self.freed, self.nodes_changed
        self.freed, self.nodes_changed = set(), False
        return freed, changed
