"""Topology domains: which nodes share a value of a node label, as dense integer ids.

A domain of label key ``k`` is the set of nodes whose label ``k`` has one given value (a rack, a
block). Nodes without the label are in no domain of it (id ``-1``). *Nested* domains refine a path
of keys, e.g. ``(block, rack)``: two nodes share a nested domain only when they agree on every key
of the path, so a rack name reused in two blocks yields two nested domains. Nesting is what lets a
tree whose root requires one block and whose children each require one rack be checked with plain
reductions over node arrays.

Both are static per node generation (labels change rarely) and cached by the snapshot.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]
IdArray = npt.NDArray[np.int32]
BoolArray = npt.NDArray[np.bool_]


@dataclass(frozen=True, slots=True)
class LabelColumn:
    """The values of one label key over all nodes.

    ids : ndarray of shape (n_nodes,), dtype=int32
        Index into ``values`` for each node, ``-1`` where the node lacks the label.
    values : tuple of str
        The distinct values, sorted.
    """

    key: str
    ids: IdArray
    values: tuple[str, ...]
    index: dict[str, int] = field(repr=False)

    @staticmethod
    def build(key: str, labels: Sequence[Mapping[str, str]]) -> LabelColumn:
        n_nodes = len(labels)
        raw = [item.get(key) for item in labels]
        present = np.fromiter((value is not None for value in raw), dtype=np.bool_, count=n_nodes)
        ids = np.full(n_nodes, -1, dtype=np.int32)
        if present.any():
            values_array = np.array([value for value in raw if value is not None], dtype=str)
            unique, inverse = np.unique(values_array, return_inverse=True)
            ids[present] = inverse.astype(np.int32)
            values = tuple(str(value) for value in unique)
        else:
            values = ()
        return LabelColumn(key=key, ids=ids, values=values, index={value: i for i, value in enumerate(values)})

    def select(self, accepted: BoolArray, *, missing: bool) -> BoolArray:
        """Nodes whose value is accepted (``accepted`` has one entry per value), or that lack the label
        when ``missing`` is true. One gather over the nodes, whatever the number of values."""
        lookup = np.empty(len(self.values) + 1, dtype=np.bool_)
        lookup[0] = missing
        lookup[1:] = accepted
        result: BoolArray = lookup[self.ids + 1]
        return result


@dataclass(frozen=True, slots=True)
class Domains:
    """Nested domains of a path of label keys.

    ids : ndarray of shape (n_nodes,), dtype=int32
        Domain of each node, ``-1`` for nodes that lack any key of the path.
    parent : ndarray of shape (n_domains,), dtype=int32
        The domain of ``path[:-1]`` that contains each domain (all zeros for a path of one key).
    values : tuple of tuple of str
        The label values along the path, one tuple per domain.
    """

    path: tuple[str, ...]
    ids: IdArray
    parent: IdArray
    values: tuple[tuple[str, ...], ...]
    _order: IntArray = field(repr=False)
    _starts: IntArray = field(repr=False)

    @property
    def n_domains(self) -> int:
        return len(self.values)

    def members(self, domain: int) -> IntArray:
        """Node indices of one domain, ascending."""
        return self._order[self._starts[domain] : self._starts[domain + 1]]

    def label(self, domain: int) -> str:
        """The narrowest label value of a domain, for messages."""
        return self.values[domain][-1] if self.values[domain] else "cluster"

    @staticmethod
    def whole(n_nodes: int) -> Domains:
        """The root of every path: one domain holding every node."""
        return Domains._from_ids((), np.zeros(n_nodes, dtype=np.int32), np.zeros(1, dtype=np.int32), ((),))

    @staticmethod
    def nest(parent: Domains, column: LabelColumn) -> Domains:
        """Refine ``parent`` by one more label key."""
        n_values = max(len(column.values), 1)
        valid = (parent.ids >= 0) & (column.ids >= 0)
        code = np.where(valid, parent.ids.astype(np.int64) * n_values + column.ids, -1)
        unique, first, inverse = np.unique(code[valid], return_index=True, return_inverse=True)
        ids = np.full(len(code), -1, dtype=np.int32)
        ids[valid] = inverse.astype(np.int32)
        valid_index = np.flatnonzero(valid)
        parents = parent.ids[valid_index[first]].astype(np.int32)
        values = tuple(
            (*parent.values[int(p)], column.values[int(c % n_values)]) for p, c in zip(parents, unique, strict=True)
        )
        return Domains._from_ids((*parent.path, column.key), ids, parents, values)

    @staticmethod
    def _from_ids(path: tuple[str, ...], ids: IdArray, parent: IdArray, values: tuple[tuple[str, ...], ...]) -> Domains:
        n_domains = len(values)
        order = np.argsort(ids, kind="stable").astype(np.int64)
        counts = np.bincount(ids[ids >= 0], minlength=n_domains)
        starts = np.zeros(n_domains + 1, dtype=np.int64)
        starts[1:] = np.cumsum(counts)
        starts += int(np.count_nonzero(ids < 0))  # nodes without the labels sort first; skip them
        return Domains(path=path, ids=ids, parent=parent, values=values, _order=order, _starts=starts)
