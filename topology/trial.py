"""Tentative placements over a snapshot's free capacity, undone exactly.

One :func:`topology.place` call works directly on the snapshot's ``free`` array (no copy of an
``n_nodes x n_resources`` matrix per gang) and records an undo step for everything it changes. Undo is
integer arithmetic, so a rollback restores the array bit for bit; ``place`` always rolls back to the
start before it returns, which is what makes it transactional.

It also keeps, per pod shape in use, the current ``pods_per_node`` array and refreshes only the rows
a take touched, so a gang with many parts pays O(n_nodes) per shape once, not once per part.
"""

from __future__ import annotations

from collections.abc import Callable

from topology.domains import IntArray
from topology.fit import ShapeFit, pods_per_node
from topology.snapshot import Snapshot


class Trial:
    """Changes to ``snapshot.free`` that can be rolled back to any :meth:`mark`."""

    def __init__(self, snapshot: Snapshot) -> None:
        self.free = snapshot.free
        self._undo: list[Callable[[], None]] = []
        self._fits: dict[int, tuple[ShapeFit, IntArray]] = {}

    def fit(self, shape: ShapeFit) -> IntArray:
        """Copies of ``shape`` that fit on each node right now, counting this trial's takes.

        The array is shared and kept current; callers must not modify it.
        """
        cached = self._fits.get(id(shape))
        if cached is None:
            cached = (shape, pods_per_node(self.free, shape))
            self._fits[id(shape)] = cached
        return cached[1]

    def take(self, shape: ShapeFit, nodes: IntArray, counts: IntArray) -> None:
        """Use ``counts[i]`` copies of ``shape`` on ``nodes[i]`` (node indices must be distinct)."""
        self._move(shape, nodes, counts, -1)
        self._undo.append(lambda: self._move(shape, nodes, counts, 1))

    def record(self, undo: Callable[[], None]) -> None:
        """Register the undo step of a change made outside the arrays (bookkeeping of the search)."""
        self._undo.append(undo)

    def mark(self) -> int:
        return len(self._undo)

    def rollback(self, mark: int = 0) -> None:
        """Undo every change made since ``mark``, newest first."""
        while len(self._undo) > mark:
            self._undo.pop()()

    def _move(self, shape: ShapeFit, nodes: IntArray, counts: IntArray, sign: int) -> None:
        for column, quota in zip(shape.columns.tolist(), shape.quotas.tolist(), strict=True):
            self.free[nodes, column] += sign * counts * quota
        for cached_shape, fit in self._fits.values():
            fit[nodes] = pods_per_node(self.free, cached_shape, nodes)
