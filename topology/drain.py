"""Where a starving gang would fit soonest: one domain, and the nodes in it whose room to hold for it.

A gang that has waited too long is given the room that frees up on a few nodes of one domain
(``scheduler/starvation.py``). This module answers, on arrays, which domain and which nodes:

- per domain of a level, the nodes that would hold the gang's minimum once what runs on them has gone
  (allocatable, not free, decides how many pods a node takes), chosen in order of the least of the gang's
  main resource still in use there, then the lowest priority running there;
- of all domains, the one where the least of that resource is still in use on the chosen nodes, then
  the one whose most important pod there is least important, then by name.

One vectorized pass per pod shape covers every domain at once (nodes sorted by domain, then by cost;
running sums restart at each domain). The result is a :class:`DrainPlan`: the rows, and what the gang
will take on each, which is what is held back from others while the room frees up.

A composite whose parts require domains of their own (a service's prefill and decode replicas, each in a
rack of one block) drains part by part (:func:`choose_parts_drain`): the top-level domain first, as for
all the gang's pods, then inside it each part's own domain, the largest part first, each seeing what
the parts before it hold as taken.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Sequence
from dataclasses import dataclass

import numpy as np

from topology.domains import FloatArray, IntArray
from topology.fit import cumsum_by_group, pods_per_node, shape_fit
from topology.quantities import PODS
from topology.request import GangRequest, PodShape
from topology.snapshot import Snapshot

#: Domains of one level a composite's drain tries before it gives up: each try is a pass over every node.
_DOMAINS_TRIED = 8
#: The level a domain belongs to: a node label key, or None for the whole cluster.
Level = str | None


@dataclass(frozen=True, slots=True)
class DrainPlan:
    """Nodes of one domain whose room, as it frees up, is kept for one gang.

    rows : ndarray of shape (n_rows,), dtype=int64
        Snapshot rows of the nodes, ascending.
    demand : ndarray of shape (n_rows, n_resources), dtype=int64
        What the gang's minimum takes on each of them.
    """

    level: Level
    domain: str
    rows: IntArray
    demand: IntArray
    #: The gang's main resource (its largest share of the cluster), what messages count in.
    resource: str
    #: How much of ``resource`` the gang asks for, and how much of that is still in use on the nodes.
    wanted: int
    in_use: int
    #: The highest priority among pods running on the nodes (-1 when none runs there).
    highest_priority: int


def minimum_shapes(request: GangRequest) -> Counter[PodShape]:
    """Pods per shape that the gang's minimums need beyond the members already placed: for a leaf, its
    unplaced members up to its minimum; for an inner node, the children with the smallest minimums."""
    counts: Counter[PodShape] = Counter()
    _add_minimum(request, counts)
    return counts


def _add_minimum(part: GangRequest, counts: Counter[PodShape]) -> None:
    if part.is_leaf:
        placed = sum(1 for member in part.pods if member.node is not None)
        unplaced = [member.shape for member in part.pods if member.node is None]
        counts.update(unplaced[: max(0, part.min_pods - placed)])
        return
    needed = sorted(part.children, key=lambda child: (child.minimum_pods(), child.key))[: part.min_children]
    for child in needed:
        _add_minimum(child, counts)


def choose_drain(
    snapshot: Snapshot,
    shapes: Counter[PodShape],
    levels: Sequence[Level],
    *,
    node_priority: IntArray,
    node_ready: FloatArray | None = None,
    taken: IntArray | None = None,
    skip: Collection[tuple[Level, str]] = (),
    within: str | None = None,
) -> DrainPlan | None:
    """The drain plan at the first of ``levels`` where some domain could ever hold ``shapes``; None if
    none could.

    node_priority : ndarray of shape (n_nodes,), dtype=int64
        The highest priority running on each node (-1 where nothing runs): the tie-break between nodes
        and domains with as much in use.
    node_ready : ndarray of shape (n_nodes,), dtype=float64, optional
        When every pod on each node will have ended (inf where unknown): at the latest by deadlines, or
        as the caller guesses from runtimes seen. The nodes that empty soonest come first, and the domain
        that would hold the gang soonest: what "fewest in use" only guesses at.
    taken : ndarray of shape (n_nodes, n_resources), dtype=int64, optional
        Room other gangs' plans keep already: not counted as the node's to give.
    skip : (level, domain) pairs not to choose (tried already without success).
    within : the only domain that may be chosen (where members of the gang already run), at every level.
    """
    wanted = [(shape, count) for shape, count in shapes.items() if count > 0]
    if not wanted or not snapshot.n_nodes:
        return None
    column = _main_resource(snapshot, wanted)
    ready = np.full(snapshot.n_nodes, np.inf) if node_ready is None else node_ready
    for level in levels:
        plan = _drain_at(
            snapshot,
            wanted,
            level,
            column,
            node_priority=node_priority,
            node_ready=ready,
            taken=taken,
            skip=skip,
            within=within,
        )
        if plan is not None:
            return plan
    return None


def _main_resource(snapshot: Snapshot, wanted: list[tuple[PodShape, int]]) -> int:
    """The column where the gang's total request is the largest share of the cluster (``pods`` only when
    it asks for nothing else)."""
    total = np.zeros(len(snapshot.resources), dtype=np.int64)
    for shape, count in wanted:
        total += snapshot.request_vector(shape.requests).vector * count
    share = total / np.maximum(snapshot.allocatable.sum(axis=0), 1)
    if PODS in snapshot.resources and share.any():
        pods = snapshot.resources.index(PODS)
        if share[np.arange(len(share)) != pods].any():
            share[pods] = 0.0
    return int(np.argmax(share))


def _drain_at(
    snapshot: Snapshot,
    wanted: list[tuple[PodShape, int]],
    level: Level,
    column: int,
    *,
    node_priority: IntArray,
    node_ready: FloatArray,
    taken: IntArray | None,
    skip: Collection[tuple[Level, str]],
    within: str | None,
) -> DrainPlan | None:
    domains = snapshot.domains(() if level is None else (level,))
    if not domains.n_domains:
        return None
    ids = domains.ids.astype(np.int64)
    capacity = snapshot.allocatable.copy() if taken is None else snapshot.allocatable - taken
    demand = np.zeros_like(capacity)
    feasible = np.ones(domains.n_domains, dtype=np.bool_)
    in_domain = ids >= 0
    # Nodes by domain, then the soonest empty, then least of the main resource in use, then lowest priority
    # running, then row.
    order = np.lexsort((np.arange(len(ids)), node_priority, snapshot.requested[:, column], node_ready, ids))
    order = order[in_domain[order]]
    sorted_ids = ids[order]
    starts = np.searchsorted(sorted_ids, np.arange(domains.n_domains))
    # Bigger shapes first: small pods fit into what big ones leave on a node.
    for shape, count in sorted(wanted, key=lambda item: -shape_fit(snapshot, item[0]).size):
        holds = pods_per_node(capacity, shape_fit(snapshot, shape))[order]
        before = cumsum_by_group(holds, starts, sorted_ids) - holds
        take = np.clip(count - before, 0, holds)
        feasible &= np.bincount(sorted_ids, weights=holds, minlength=domains.n_domains) >= count
        assigned = np.zeros(len(ids), dtype=np.int64)
        assigned[order] = take
        vector = snapshot.request_vector(shape.requests).vector
        capacity -= assigned[:, None] * vector
        demand += assigned[:, None] * vector
    for skipped_level, value in skip:
        if skipped_level == level:
            feasible[_domain_index(snapshot, level, value)] = False
    if within is not None:
        only = np.zeros_like(feasible)
        only[_domain_index(snapshot, level, within)] = True
        feasible &= only
    if not feasible.any():
        return None
    used = demand.any(axis=1) & in_domain
    still = np.clip(demand[:, column] - np.maximum(snapshot.free[:, column], 0), 0, None)
    in_use = np.bincount(ids[used], weights=still[used], minlength=domains.n_domains).astype(np.int64)
    highest = np.full(domains.n_domains, -1, dtype=np.int64)
    np.maximum.at(highest, ids[used], node_priority[used])
    soonest = np.full(domains.n_domains, -np.inf)
    np.maximum.at(soonest, ids[used], node_ready[used])
    # Domain ids follow the sorted label values, so the last key breaks ties by name.
    candidates = np.flatnonzero(feasible)
    rank = np.lexsort((candidates, highest[candidates], in_use[candidates], soonest[candidates]))
    best = int(candidates[rank[0]])
    rows = np.flatnonzero(used & (ids == best)).astype(np.int64)
    return DrainPlan(
        level=level,
        domain=domains.label(best),
        rows=rows,
        demand=demand[rows],
        resource=snapshot.resources[column],
        wanted=int(demand[rows, column].sum()),
        in_use=int(in_use[best]),
        highest_priority=int(highest[best]),
    )


def _domain_index(snapshot: Snapshot, level: Level, value: str) -> int | IntArray:
    """The domain of ``level`` named ``value`` (one key's domains are numbered as its sorted values); an
    empty selection when no node carries it any more."""
    if level is None:
        return 0
    found = snapshot.label(level).index.get(value)
    return np.zeros(0, dtype=np.int64) if found is None else found


def parts_constrained(request: GangRequest) -> bool:
    """Whether a part below the gang's root requires a domain of its own (a replica in one rack)."""
    return any(part.required is not None for part in request.walk() if part is not request)


def choose_parts_drain(
    snapshot: Snapshot,
    request: GangRequest,
    level: Level,
    *,
    node_priority: IntArray,
    node_ready: FloatArray | None = None,
    taken: IntArray | None = None,
    skip: Collection[tuple[Level, str]] = (),
) -> DrainPlan | None:
    """The drain plan of a composite whose parts require domains of their own: the domain of ``level`` (the
    composite's required level, or None for the whole cluster) chosen as for all its pods, then inside it
    a domain per part its minimum needs (the largest first; parts of parts alike), their nodes and demand
    together. None when some part finds no domain."""
    held = np.zeros_like(snapshot.allocatable) if taken is None else taken
    found = _parts_demand(snapshot, request, level, held, node_priority=node_priority, node_ready=node_ready, skip=skip)
    if found is None:
        return None
    whole, demand = found
    rows = np.flatnonzero(demand.any(axis=1)).astype(np.int64)
    main = snapshot.resources.index(whole.resource)
    still = np.clip(demand[rows, main] - np.maximum(snapshot.free[rows, main], 0), 0, None)
    return DrainPlan(
        level=level,
        domain=whole.domain,
        rows=rows,
        demand=demand[rows],
        resource=whole.resource,
        wanted=int(demand[rows, main].sum()),
        in_use=int(still.sum()),
        highest_priority=int(node_priority[rows].max()) if len(rows) else -1,
    )


def _parts_demand(
    snapshot: Snapshot,
    part: GangRequest,
    level: Level,
    taken: IntArray,
    *,
    node_priority: IntArray,
    node_ready: FloatArray | None,
    skip: Collection[tuple[Level, str]],
) -> tuple[DrainPlan, IntArray] | None:
    """The part's drain (for all its pods) and, per node, what it and its parts take there. A domain whose
    parts do not all find room inside it is passed over for the next one, ``_DOMAINS_TRIED`` at most."""
    passed = set(skip)
    for _ in range(_DOMAINS_TRIED):
        whole = choose_drain(
            snapshot, minimum_shapes(part), (level,), node_priority=node_priority, node_ready=node_ready,
            taken=taken, skip=passed,
        )  # fmt: skip
        if whole is None:
            return None
        demand = np.zeros_like(snapshot.allocatable)
        if not parts_constrained(part):
            demand[whole.rows] = whole.demand
            return whole, demand
        inside = _inside_parts(
            snapshot, part, level, whole.domain, taken, node_priority=node_priority, node_ready=node_ready
        )
        if inside is not None:
            return whole, inside
        if level is None:
            return None  # the whole cluster: there is no other domain
        passed.add((level, whole.domain))
    return None


def _inside_parts(
    snapshot: Snapshot,
    part: GangRequest,
    level: Level,
    domain: str,
    taken: IntArray,
    *,
    node_priority: IntArray,
    node_ready: FloatArray | None,
) -> IntArray | None:
    """Per node, what the parts ``part``'s minimum needs take inside ``domain``; None if one finds no room."""
    inside = taken.copy()
    if level is not None:  # room outside the domain reads as taken
        outside = snapshot.label(level).ids != _domain_index(snapshot, level, domain)
        inside[outside] = snapshot.allocatable[outside]
    demand = np.zeros_like(snapshot.allocatable)
    needed = sorted(part.children, key=lambda child: (child.minimum_pods(), child.key))[: part.min_children]
    for child in sorted(needed, key=lambda child: (-child.minimum_pods(), child.key)):
        if not minimum_shapes(child):
            continue  # a part whose minimum asks for nothing more
        found = _parts_demand(
            snapshot, child, child.required, inside, node_priority=node_priority, node_ready=node_ready, skip=()
        )
        if found is None:
            return None
        inside += found[1]
        demand += found[1]
    return demand
