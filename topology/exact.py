"""An exhaustive search for small leaves with several pod shapes, where greedy packing can miss.

Packing pods of one shape is exact by counting (a domain holds ``sum(fit)`` copies). With several
shapes competing for the same nodes it is multi-dimensional bin packing: placing the big shape first
usually works, but not always. When the greedy pass fails on a leaf small enough to enumerate, this
search decides it for certain: it walks the pods (biggest shape first) and tries every node, treating
pods of one shape as interchangeable (their nodes are taken in non-decreasing order, and skipping one
pod of a shape skips the rest), within a step budget.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

#: Beyond these sizes the enumeration is not attempted and greedy's answer stands.
MAX_NODES = 12
MAX_PODS = 12
STEP_BUDGET = 200_000


@dataclass(frozen=True, slots=True)
class SmallLeaf:
    """A leaf reduced to plain integers.

    free[j][r] : free amount of resource r on candidate node j
    demand[s][r] : request of shape s for resource r
    allowed[s][j] : whether shape s may use node j
    pending[s] : pods of shape s still to place, shapes ordered biggest first
    """

    free: Sequence[Sequence[int]]
    demand: Sequence[Sequence[int]]
    allowed: Sequence[Sequence[bool]]
    pending: Sequence[int]


def solve(leaf: SmallLeaf, need: int) -> list[tuple[int, int]] | None:
    """Pick ``need`` pods and a node for each so that nothing overflows.

    Returns ``(shape, node)`` pairs, or None when no such choice exists (or the budget ran out).
    """
    pods = [shape for shape, count in enumerate(leaf.pending) for _ in range(count)]
    free = [list(row) for row in leaf.free]
    n_nodes = len(free)
    chosen: list[tuple[int, int]] = []
    steps = 0

    def next_shape(i: int) -> int:
        shape = pods[i]
        while i < len(pods) and pods[i] == shape:
            i += 1
        return i

    def fits(shape: int, node: int) -> bool:
        return leaf.allowed[shape][node] and all(
            amount <= room for amount, room in zip(leaf.demand[shape], free[node], strict=True)
        )

    def move(shape: int, node: int, sign: int) -> None:
        row = free[node]
        for r, amount in enumerate(leaf.demand[shape]):
            row[r] -= sign * amount

    def search(i: int, first_node: int) -> bool:
        nonlocal steps
        steps += 1
        if len(chosen) == need:
            return True
        if steps > STEP_BUDGET or len(pods) - i < need - len(chosen):
            return False
        shape = pods[i]
        for node in range(first_node, n_nodes):
            if fits(shape, node):
                move(shape, node, 1)
                chosen.append((shape, node))
                same_next = i + 1 < len(pods) and pods[i + 1] == shape
                if search(i + 1, node if same_next else 0):
                    return True
                chosen.pop()
                move(shape, node, -1)
        return search(next_shape(i), 0)

    return list(chosen) if search(0, 0) else None
