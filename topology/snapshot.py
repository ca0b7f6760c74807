"""Every node's capacity as dense arrays, kept current one pod at a time.

The snapshot is the engine's whole view of the cluster:

allocatable, requested, free : ndarray of shape (n_nodes, n_resources), dtype=int64, Fortran order
    Base units (millicores, bytes, counts). ``requested`` sums bound and assumed pods; ``free`` is
    ``allocatable - requested`` and is what placement reads. Columns are contiguous (Fortran order)
    because fit reads one resource over all nodes at a time.

Costs, which callers rely on:

- :meth:`assume` / :meth:`forget` of a pod touch one row: O(n_resources).
- Changing only a node's allocatable touches one row.
- Adding or removing a node, changing its labels or taints, or seeing a resource name for the first
  time marks the arrays stale; they are rebuilt once, on next access (so a burst of node events costs
  one rebuild), reusing the per-node sums of pods already counted.

Node order follows the configured topology levels (then the name), so that nodes adjacent in index
are adjacent in the network; placement's tie-breaks by index then keep gangs together.

Everything derived from labels (label columns, nested domains, eligibility masks) is cached per
:attr:`generation`, which changes at each rebuild.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

import numpy as np
import numpy.typing as npt

from topology.domains import Domains, IdArray, IntArray, LabelColumn
from topology.nodes import NOT_READY_TAINT, NodeRecord, Taint, Topology
from topology.quantities import merge_names

if TYPE_CHECKING:
    from topology.outcome import Placement

T = TypeVar("T")

#: Effects that keep a pod off a node; PreferNoSchedule only affects scoring.
FILTER_EFFECTS = ("NoSchedule", "NoExecute")


@dataclass(frozen=True, slots=True)
class TaintTable:
    """Distinct filtering taints of the cluster and which nodes carry them.

    by_node : ndarray of shape (n_nodes, max_taints_per_node), dtype=int32
        Taint ids in each node's own order, padded with -1.
    """

    taints: tuple[Taint, ...]
    by_node: IdArray


@dataclass(frozen=True, slots=True)
class RequestVector:
    """A request mapping laid out on the snapshot's resource columns.

    ``missing`` names requested resources that no node offers (such a pod fits nowhere).
    """

    vector: IntArray
    columns: IntArray
    missing: tuple[str, ...]


class Snapshot:
    """Nodes, their free capacity and topology domains; see the module docstring for costs."""

    def __init__(
        self,
        nodes: Iterable[NodeRecord] = (),
        *,
        topology: Topology | None = None,
        pods: Iterable[tuple[str, str, Mapping[str, int]]] = (),
    ) -> None:
        self.topology = topology or Topology()
        self._records: dict[str, NodeRecord] = {}
        self._pods: dict[str, tuple[str, Mapping[str, int]]] = {}
        self._pods_by_node: dict[str, set[str]] = {}
        self._stale_nodes: set[str] = set()
        self._dirty = True
        self._generation = 0
        self._capacity_version = 0
        self._names: tuple[str, ...] = ()
        self._index: dict[str, int] = {}
        self._resources: tuple[str, ...] = ()
        self._columns: dict[str, int] = {}
        self._allocatable = np.zeros((0, 0), dtype=np.int64, order="F")
        self._requested = np.zeros((0, 0), dtype=np.int64, order="F")
        self._free = np.zeros((0, 0), dtype=np.int64, order="F")
        self._taints = TaintTable(taints=(), by_node=np.zeros((0, 0), dtype=np.int32))
        self._labels: list[Mapping[str, str]] = []
        self._static_cache: dict[object, object] = {}
        self._capacity_cache: dict[object, object] = {}
        #: Changes whenever a pod is counted or forgotten (requested and free change).
        self._usage_version = 0
        self._usage_cache: dict[object, tuple[tuple[int, int], object]] = {}
        self._vectors: dict[tuple[tuple[str, int], ...], RequestVector] = {}
        for node in nodes:
            self._records[node.name] = node
        for pod, node_name, requests in pods:
            self.assume(pod, node_name, requests)

    # -- nodes -------------------------------------------------------------------------------

    def set_node(self, node: NodeRecord) -> None:
        """Add or replace a node. Only an allocatable change is applied in place; others rebuild."""
        old = self._records.get(node.name)
        if old == node:
            return
        self._records[node.name] = node
        if (
            old is not None
            and not self._dirty
            and old.static_key() == node.static_key()
            and all(name in self._columns for name in node.allocatable)
        ):
            row = self._index[node.name]
            self._allocatable[row, :] = 0
            for name, amount in node.allocatable.items():
                self._allocatable[row, self._columns[name]] = amount
            self._free[row, :] = self._allocatable[row, :] - self._requested[row, :]
            self._capacity_version += 1
            self._capacity_cache.clear()
            return
        self._dirty = True

    def remove_node(self, name: str) -> None:
        """Forget a node. Pods recorded on it stay recorded and count again if it comes back."""
        if self._records.pop(name, None) is not None:
            self._dirty = True

    def node(self, name: str) -> NodeRecord | None:
        return self._records.get(name)

    # -- pods --------------------------------------------------------------------------------

    def assume(self, pod: str, node: str, requests: Mapping[str, int]) -> None:
        """Count a pod's requests on a node (bound, or assumed by a placement). Replaces any earlier
        record of the same pod. O(n_resources).

        ``requests`` is kept as given, not copied (callers share one dict among pods that request the
        same): it must not be modified afterwards.
        """
        known = self._pods.get(pod)
        if known is not None:
            if known[0] == node and (known[1] is requests or known[1] == requests):
                self._pods[pod] = (node, requests)  # counted already: a placement's pod seen bound where assumed
                return
            self.forget(pod)
        self._pods[pod] = (node, requests)
        self._pods_by_node.setdefault(node, set()).add(pod)
        self._apply(node, requests, 1)

    def forget(self, pod: str) -> None:
        """Stop counting a pod; a no-op for a pod that is not counted. O(n_resources)."""
        entry = self._pods.pop(pod, None)
        if entry is None:
            return
        node, requests = entry
        on_node = self._pods_by_node.get(node)
        if on_node is not None:
            on_node.discard(pod)
            if not on_node:
                del self._pods_by_node[node]
        self._apply(node, requests, -1)

    def assume_placement(self, placement: Placement) -> None:
        """Count every pod of a placement on its node."""
        for assignment in placement.assignments:
            self.assume(assignment.pod, assignment.node, dict(assignment.shape.requests))

    def pods_on(self, node: str) -> frozenset[str]:
        """The pods counted on a node (bound or assumed)."""
        return frozenset(self._pods_by_node.get(node, ()))

    def counted(self) -> Iterator[tuple[str, str, Mapping[str, int]]]:
        """Every pod (or other key) counted: its node, and what it takes there."""
        for pod, (node, requests) in self._pods.items():
            yield pod, node, requests

    def node_of(self, pod: str) -> str | None:
        entry = self._pods.get(pod)
        return entry[0] if entry else None

    @property
    def pod_count(self) -> int:
        return len(self._pods)

    def _apply(self, node: str, requests: Mapping[str, int], sign: int) -> None:
        row = self._index.get(node)
        if row is None or node in self._stale_nodes:
            if node in self._records:
                self._stale_nodes.add(node)
                self._dirty = True
            return
        if any(name not in self._columns for name in requests):
            self._stale_nodes.add(node)
            self._dirty = True
            return
        for name, amount in requests.items():
            column = self._columns[name]
            self._requested[row, column] += sign * amount
            self._free[row, column] -= sign * amount
        self._usage_version += 1

    # -- arrays ------------------------------------------------------------------------------

    def _ensure(self) -> None:
        if self._dirty:
            self._rebuild()

    def _rebuild(self) -> None:
        levels = self.topology.levels
        records = sorted(self._records.values(), key=lambda r: (tuple(r.labels.get(key, "") for key in levels), r.name))
        names = tuple(record.name for record in records)
        resources = merge_names(
            *(record.allocatable for record in records), *(requests for _, requests in self._pods.values())
        )
        columns = {name: i for i, name in enumerate(resources)}
        n_nodes, n_resources = len(records), len(resources)

        allocatable = np.zeros((n_nodes, n_resources), dtype=np.int64, order="F")
        for row, record in enumerate(records):
            for name, amount in record.allocatable.items():
                allocatable[row, columns[name]] = amount

        requested = np.zeros((n_nodes, n_resources), dtype=np.int64, order="F")
        old_rows = np.array([self._index.get(name, -1) for name in names], dtype=np.int64)
        reusable = (old_rows >= 0) & np.array([name not in self._stale_nodes for name in names], dtype=np.bool_)
        if reusable.any() and self._requested.shape[1]:
            old_columns = np.array([columns[name] for name in self._resources], dtype=np.int64)
            target = np.flatnonzero(reusable)
            requested[np.ix_(target, old_columns)] = self._requested[old_rows[target]]
        for row in np.flatnonzero(~reusable).tolist():
            for pod in self._pods_by_node.get(names[row], ()):
                for name, amount in self._pods[pod][1].items():
                    requested[row, columns[name]] += amount

        self._names = names
        self._index = {name: i for i, name in enumerate(names)}
        self._resources = resources
        self._columns = columns
        self._allocatable = allocatable
        self._requested = requested
        self._free = np.asfortranarray(allocatable - requested)
        self._taints = self._build_taints(records)
        self._labels = [record.labels for record in records]
        self._stale_nodes.clear()
        self._static_cache.clear()
        self._capacity_cache.clear()
        self._usage_cache.clear()
        self._vectors.clear()
        self._generation += 1
        self._capacity_version += 1
        self._dirty = False
        for key in levels:
            self.label(key)

    @staticmethod
    def _build_taints(records: list[NodeRecord]) -> TaintTable:
        table: dict[Taint, int] = {}
        per_node: list[list[int]] = []
        for record in records:
            taints = [taint for taint in record.taints if taint.effect in FILTER_EFFECTS]
            if not record.ready and not any(taint.key == NOT_READY_TAINT.key for taint in taints):
                taints.append(NOT_READY_TAINT)
            per_node.append([table.setdefault(taint, len(table)) for taint in taints])
        width = max((len(ids) for ids in per_node), default=0)
        by_node = np.full((len(records), width), -1, dtype=np.int32)
        for row, ids in enumerate(per_node):
            by_node[row, : len(ids)] = ids
        return TaintTable(taints=tuple(table), by_node=by_node)

    @property
    def generation(self) -> int:
        """Changes whenever node labels, taints or the node set change (cache key for masks)."""
        self._ensure()
        return self._generation

    @property
    def n_nodes(self) -> int:
        self._ensure()
        return len(self._names)

    @property
    def names(self) -> tuple[str, ...]:
        self._ensure()
        return self._names

    def index_of(self, name: str) -> int | None:
        self._ensure()
        return self._index.get(name)

    @property
    def records(self) -> tuple[NodeRecord, ...]:
        """Node records in index order."""
        self._ensure()
        return tuple(self._records[name] for name in self._names)

    @property
    def resources(self) -> tuple[str, ...]:
        self._ensure()
        return self._resources

    @property
    def allocatable(self) -> IntArray:
        self._ensure()
        return self._allocatable

    @property
    def requested(self) -> IntArray:
        self._ensure()
        return self._requested

    @property
    def free(self) -> IntArray:
        """Read by placement, which may change it only inside a trial that it reverts."""
        self._ensure()
        return self._free

    @property
    def taints(self) -> TaintTable:
        self._ensure()
        return self._taints

    @property
    def unschedulable(self) -> npt.NDArray[np.bool_]:
        return self.cached(
            "unschedulable",
            lambda: np.array([self._records[name].unschedulable for name in self._names], dtype=np.bool_),
        )

    def request_vector(self, requests: tuple[tuple[str, int], ...]) -> RequestVector:
        """A request laid out on the resource columns; cached until the columns change."""
        self._ensure()
        found = self._vectors.get(requests)
        if found is None:
            vector = np.zeros(len(self._resources), dtype=np.int64)
            missing = []
            for name, amount in requests:
                column = self._columns.get(name)
                if column is None:
                    if amount > 0:
                        missing.append(name)
                else:
                    vector[column] = amount
            found = RequestVector(
                vector=vector, columns=np.flatnonzero(vector > 0).astype(np.int64), missing=tuple(missing)
            )
            self._vectors[requests] = found
        return found

    # -- labels and domains ------------------------------------------------------------------

    def cached(self, key: object, build: Callable[[], T]) -> T:
        """Memoise something derived from node labels, taints or the node set (per generation)."""
        self._ensure()
        if key not in self._static_cache:
            self._static_cache[key] = build()
        return self._static_cache[key]  # type: ignore[return-value]

    def cached_capacity(self, key: object, build: Callable[[], T]) -> T:
        """Memoise something derived from allocatable (per generation and allocatable change)."""
        self._ensure()
        if key not in self._capacity_cache:
            self._capacity_cache[key] = build()
        return self._capacity_cache[key]  # type: ignore[return-value]

    def cached_usage(self, key: object, build: Callable[[], T]) -> T:
        """Memoise something derived from what pods request (until the next pod is counted or forgotten, or
        allocatable changes)."""
        self._ensure()
        version = (self._usage_version, self._capacity_version)
        found = self._usage_cache.get(key)
        if found is None or found[0] != version:
            found = (version, build())
            self._usage_cache[key] = found
        return found[1]  # type: ignore[return-value]

    def label(self, key: str) -> LabelColumn:
        """The values of a node label over all nodes; built once per generation with one np.unique."""
        return self.cached(("label", key), lambda: LabelColumn.build(key, self._labels))

    def domains(self, path: tuple[str, ...]) -> Domains:
        """Nested domains of a path of label keys (``()`` is the whole cluster)."""

        def build() -> Domains:
            if not path:
                return Domains.whole(len(self._names))
            return Domains.nest(self.domains(path[:-1]), self.label(path[-1]))

        return self.cached(("domains", path), build)

    @property
    def level_ids(self) -> IdArray:
        """Domain ids of the configured levels, shape (n_levels, n_nodes), dtype=int32, -1 if absent."""

        def build() -> IdArray:
            levels = self.topology.levels
            if not levels:
                return np.zeros((0, len(self._names)), dtype=np.int32)
            return np.stack([self.label(key).ids for key in levels])

        return self.cached("level_ids", build)
