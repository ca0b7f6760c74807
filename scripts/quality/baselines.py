"""The placement algorithms Phalanx is compared with, on the same snapshot arrays.

Each is a callable ``(snapshot, request, *, max_tries=...) -> Placement | Infeasible``, the signature of
``topology.place``, so the scheduling cycle can run any of them (the Philly replay does). They handle
leaf gangs (the benchmarks' workloads), treat members already bound as placed, and are all-or-nothing:
a gang is placed only if its minimum fits, else nothing of it is. None changes the snapshot.

- ``kube-least`` / ``kube-most``: kube-scheduler's per-pod filter and score, pod after pod:
  NodeResourcesFit with LeastAllocated (its default, spreading) or MostAllocated, over cpu and memory
  with weight 1 each as upstream's defaults; the feasible nodes it scores are sampled as upstream
  does (``percentageOfNodesToScore`` adaptive: 50% minus 1% per 125 nodes, at least 5% and at least
  100 nodes), from a start index that rotates between pods. A required topology key works as users
  get it from kube-scheduler, through pod affinity: the first pod goes anywhere, the others must
  share its domain. A preferred key is preferred pod affinity (InterPodAffinity, weight 2).
- ``upstream-tas``: kube-scheduler's topology-aware workload scheduling (1.36 alpha): one candidate
  placement per domain of the requested key, each filled pod by pod with the default scoring, the
  candidates scored as a whole by the allocation ratio of their nodes (MostAllocated) and the pods
  they place; no key means one candidate, the whole cluster.
- ``kueue-bestfit``: Kueue TAS's BestFit: at the requested level the tightest domain that fits; a
  preferred request that fits no single domain climbs a level; inside a domain, children are taken
  largest first until the rest fits into one, which is then the tightest that does; down to nodes.
- ``first-fit``: domains and nodes in name order, each node filled before the next.
- ``random``: a random domain that fits, random nodes inside.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from topology import HOSTNAME, Assignment, DomainChoice, GangRequest, Infeasible, Placement, PodShape, Snapshot, place
from topology.fit import pods_per_node, shape_fit

Placer = Callable[..., Placement | Infeasible]

#: kube-scheduler's sampling of feasible nodes (pkg/scheduler/schedule_one.go).
MIN_FEASIBLE_NODES = 100
MIN_FEASIBLE_PERCENT = 5
AFFINITY_WEIGHT = 2  # InterPodAffinity's default score weight


@dataclass(slots=True)
class _Gang:
    """A leaf gang as the baselines see it: pods still to place, per member, and what is pinned."""

    request: GangRequest
    pods: list[tuple[str, PodShape]]
    pinned: list[int]
    need: int  # pods to place at least

    @staticmethod
    def of(snapshot: Snapshot, request: GangRequest) -> _Gang:
        if not request.is_leaf:
            raise ValueError("the baselines place leaf gangs only")
        pods, pinned = [], []
        for member in request.pods:
            if member.node is None:
                pods.append((member.key, member.shape))
            else:
                row = snapshot.index_of(member.node)
                if row is not None:
                    pinned.append(row)
        return _Gang(request, pods, pinned, max(0, request.min_pods - len(pinned)))

    @property
    def key(self) -> str | None:
        return self.request.required or self.request.preferred


class _Scratch:
    """Free capacity for one attempt: a copy, so that nothing touches the snapshot."""

    def __init__(self, snapshot: Snapshot) -> None:
        self.snapshot = snapshot
        self.free = snapshot.free.copy()
        self.taken: list[tuple[str, int, PodShape]] = []

    def fits(self, shape: PodShape, scope: np.ndarray | None = None) -> np.ndarray:
        """Copies of ``shape`` that fit on each node (zero outside ``scope``)."""
        counts = pods_per_node(self.free, shape_fit(self.snapshot, shape))
        if scope is not None:
            counts = np.where(scope, counts, 0)
        return counts

    def take(self, pod: str, row: int, shape: PodShape) -> None:
        fit = shape_fit(self.snapshot, shape)
        self.free[row, fit.columns] -= fit.quotas
        self.taken.append((pod, row, shape))

    def placement(self, gang: _Gang, domains: tuple[DomainChoice, ...] = ()) -> Placement:
        names = self.snapshot.names
        assignments = tuple(Assignment(pod=pod, node=names[row], shape=shape) for pod, row, shape in self.taken)
        placed = {pod for pod, _, _ in self.taken}
        unplaced = tuple(pod for pod, _ in gang.pods if pod not in placed)
        return Placement(gang=gang.request.key, assignments=assignments, domains=domains, unplaced=unplaced)


def _infeasible(snapshot: Snapshot, gang: _Gang, why: str) -> Infeasible:
    return Infeasible(gang=gang.request.key, reason=f"Gang {gang.request.key} {why}", total=snapshot.n_nodes)


def _domain_choice(snapshot: Snapshot, gang: _Gang, rows: list[int]) -> tuple[DomainChoice, ...]:
    key = gang.request.required
    if key is None or not rows:
        return ()
    value = snapshot.records[rows[0]].labels.get(key, "")
    return (DomainChoice(gang=gang.request.key, key=key, value=value, required=True),)


def _scope_of(snapshot: Snapshot, key: str, rows: list[int]) -> np.ndarray | None:
    """Nodes in the same domain of ``key`` as ``rows`` (a pinned or first member), or None."""
    if not rows:
        return None
    ids = snapshot.label(key).ids
    value = ids[rows[0]]
    return (ids == value) & (value >= 0)


# -- kube-scheduler, pod by pod ---------------------------------------------------------------------


class KubeScheduler:
    """Per-pod filter and score (see the module docstring); ``strategy`` is "least" or "most"."""

    def __init__(self, strategy: str = "least", *, sampling: bool = True, seed: int = 0) -> None:
        self.strategy = strategy
        self.sampling = sampling
        self.random = random.Random(seed)
        self.next_start = 0

    def __call__(self, snapshot: Snapshot, request: GangRequest, *, max_tries: int = 16) -> Placement | Infeasible:
        gang = _Gang.of(snapshot, request)
        scratch = _Scratch(snapshot)
        required, preferred = request.required, request.preferred
        anchor = list(gang.pinned)
        for index, (pod, shape) in enumerate(gang.pods):
            scope = _scope_of(snapshot, required, anchor) if required else None
            if required and scope is None:
                scope = snapshot.label(required).ids >= 0  # the first pod needs a node that has the label
            row = self.pick(scratch, shape, scope, preferred, anchor)
            if row is None:
                if index >= gang.need:
                    break  # the minimum is placed; the rest are extras that wait
                return _infeasible(snapshot, gang, f"could not place pod {index + 1} of {len(gang.pods)}")
            scratch.take(pod, row, shape)
            anchor.append(row)
        return scratch.placement(gang, _domain_choice(snapshot, gang, anchor))

    def pick(
        self,
        scratch: _Scratch,
        shape: PodShape,
        scope: np.ndarray | None,
        preferred: str | None,
        anchor: list[int],
    ) -> int | None:
        feasible = np.flatnonzero(scratch.fits(shape, scope) > 0)
        if not len(feasible):
            return None
        if self.sampling:
            feasible = self._sample(feasible, scratch.snapshot.n_nodes)
        score = node_scores(scratch, shape, feasible, most=self.strategy == "most")
        if preferred and anchor:
            ids = scratch.snapshot.label(preferred).ids
            near = np.isin(ids[feasible], ids[anchor]) & (ids[feasible] >= 0)
            score = score + AFFINITY_WEIGHT * 100.0 * near
        best = np.flatnonzero(score == score.max())
        return int(feasible[best[self.random.randrange(len(best))]])

    def _sample(self, feasible: np.ndarray, n_nodes: int) -> np.ndarray:
        """The first feasible nodes from a rotating start, as many as upstream scores."""
        if n_nodes < MIN_FEASIBLE_NODES:
            return feasible
        percent = max(MIN_FEASIBLE_PERCENT, 50 - n_nodes // 125)
        wanted = max(MIN_FEASIBLE_NODES, n_nodes * percent // 100)
        if len(feasible) <= wanted:
            self.next_start = (self.next_start + n_nodes) % n_nodes
            return feasible
        rotated = np.concatenate([feasible[feasible >= self.next_start], feasible[feasible < self.next_start]])
        chosen = rotated[:wanted]
        last = int(chosen[-1])
        self.next_start = (last + 1) % n_nodes
        return np.sort(chosen)


def node_scores(scratch: _Scratch, shape: PodShape, rows: np.ndarray, *, most: bool) -> np.ndarray:
    """NodeResourcesFit's score (0-100) of placing ``shape`` on ``rows``: cpu and memory, weight 1 each."""
    snapshot = scratch.snapshot
    requests = dict(shape.requests)
    scores = np.zeros(len(rows))
    used = 0
    for name in ("cpu", "memory"):
        if name not in snapshot.resources:
            continue
        column = snapshot.resources.index(name)
        allocatable = snapshot.allocatable[rows, column].astype(np.float64)
        after = allocatable - scratch.free[rows, column] + requests.get(name, 0)
        ratio = np.divide(after, allocatable, out=np.ones_like(after), where=allocatable > 0)
        scores += 100.0 * (ratio if most else 1.0 - ratio)
        used += 1
    return scores / max(used, 1)


# -- upstream topology-aware workload scheduling ------------------------------------------------------


class UpstreamTAS:
    """One candidate per domain of the key, greedy inside, scored as a whole (module docstring)."""

    def __init__(self, *, seed: int = 0) -> None:
        self.inner = KubeScheduler("least", sampling=False, seed=seed)

    def __call__(self, snapshot: Snapshot, request: GangRequest, *, max_tries: int = 16) -> Placement | Infeasible:
        gang = _Gang.of(snapshot, request)
        key = gang.key
        if key is None:
            return self._fill(snapshot, gang, None) or _infeasible(snapshot, gang, "does not fit in the cluster")
        ids = snapshot.label(key).ids
        candidates = np.unique(ids[ids >= 0])
        if gang.pinned:
            candidates = np.unique(ids[gang.pinned])
        room = _room_per_domain(snapshot, gang, ids)
        best: tuple[float, Placement] | None = None
        for domain in candidates:
            if room.get(int(domain), 0) < gang.need:
                continue  # cannot hold the minimum: upstream's simulation would fail here too
            placed = self._fill(snapshot, gang, ids == domain)
            if placed is None:
                continue
            score = self._score(snapshot, placed, ids == domain)
            if best is None or score > best[0]:
                best = (score, placed)
        if best is not None:
            return best[1]
        if request.preferred and not request.required:
            return self._fill(snapshot, gang, None) or _infeasible(snapshot, gang, "does not fit in the cluster")
        return _infeasible(snapshot, gang, f"fits in no single {key}")

    def _fill(self, snapshot: Snapshot, gang: _Gang, scope: np.ndarray | None) -> Placement | None:
        scratch = _Scratch(snapshot)
        for index, (pod, shape) in enumerate(gang.pods):
            row = self.inner.pick(scratch, shape, scope, None, [])
            if row is None:
                if index >= gang.need:
                    break
                return None
            scratch.take(pod, row, shape)
        rows = [row for _, row, _ in scratch.taken]
        return scratch.placement(gang, _domain_choice(snapshot, gang, rows or gang.pinned))

    @staticmethod
    def _score(snapshot: Snapshot, placed: Placement, scope: np.ndarray) -> float:
        """Allocation ratio of the domain's nodes once placed (MostAllocated), plus the pods placed."""
        ratios = []
        requested = snapshot.requested[scope].astype(np.float64).sum(axis=0)
        allocatable = snapshot.allocatable[scope].astype(np.float64).sum(axis=0)
        for assignment in placed.assignments:
            for name, amount in assignment.shape.requests:
                if name in snapshot.resources:
                    requested[snapshot.resources.index(name)] += amount
        for name in ("cpu", "memory"):
            if name in snapshot.resources:
                column = snapshot.resources.index(name)
                if allocatable[column] > 0:
                    ratios.append(requested[column] / allocatable[column])
        return 100.0 * float(np.mean(ratios) if ratios else 0.0) + len(placed.assignments)


def _room_per_domain(snapshot: Snapshot, gang: _Gang, ids: np.ndarray) -> dict[int, int]:
    """Copies of the gang's (first) shape that fit per domain id: a cheap upper bound to skip domains."""
    if not gang.pods:
        return {}
    counts = pods_per_node(snapshot.free, shape_fit(snapshot, gang.pods[0][1]))
    valid = ids >= 0
    sums = np.bincount(ids[valid], weights=counts[valid]).astype(np.int64)
    return {int(domain): int(total) for domain, total in enumerate(sums)}


# -- Kueue TAS BestFit --------------------------------------------------------------------------------


class KueueBestFit:
    """Tightest fitting domain, climbing for preferred requests, largest-first then best-fit inside."""

    def __call__(self, snapshot: Snapshot, request: GangRequest, *, max_tries: int = 16) -> Placement | Infeasible:
        gang = _Gang.of(snapshot, request)
        if not gang.pods:
            return _Scratch(snapshot).placement(gang)
        shape = gang.pods[0][1]
        if any(other != shape for _, other in gang.pods):
            raise ValueError("kueue-bestfit places gangs of one pod shape")
        counts = pods_per_node(snapshot.free, shape_fit(snapshot, shape))
        levels = [level for level in snapshot.topology.levels if level != HOSTNAME]
        key = gang.key
        if key is not None and key not in levels:
            levels.append(key)
        want = len(gang.pods)
        start = levels.index(key) if key is not None else 0
        everything = np.ones(snapshot.n_nodes, dtype=bool)
        if gang.pinned and request.required:
            everything = _scope_of(snapshot, request.required, gang.pinned)  # type: ignore[assignment]
        tried = range(start, -1, -1) if request.preferred or key is None else [start]
        for level in tried:
            ids = snapshot.label(levels[level]).ids
            sums = _domain_sums(ids, counts, everything)
            fitting = [(total, domain) for domain, total in sums.items() if total >= want]
            if fitting:
                _, domain = min(fitting)
                rows = self._descend(snapshot, counts, (ids == domain) & everything, levels[level + 1 :], want)
                return self._commit(snapshot, gang, rows)
        if key is None or request.preferred:
            total = int(counts[everything].sum())
            if total >= gang.need:
                return self._commit(snapshot, gang, self._descend(snapshot, counts, everything, levels, want))
        return _infeasible(snapshot, gang, f"fits in no single {key or 'cluster'}")

    def _descend(
        self, snapshot: Snapshot, counts: np.ndarray, scope: np.ndarray, below: list[str], want: int
    ) -> list[int]:
        """Nodes for ``want`` pods inside ``scope``: per level, largest children first, best fit last."""
        if not below:
            rows = np.flatnonzero(scope & (counts > 0))
            return _best_fit_units(rows, counts[rows], want)
        ids = snapshot.label(below[0]).ids
        sums = _domain_sums(ids, counts, scope)
        chosen = _best_fit_units(np.array(list(sums), dtype=np.int64), np.array(list(sums.values())), want)
        rows: list[int] = []
        for domain, take in Counter(chosen).items():  # in the order chosen: largest first, best fit last
            rows += self._descend(snapshot, counts, scope & (ids == domain), below[1:], take)
        return rows

    @staticmethod
    def _commit(snapshot: Snapshot, gang: _Gang, rows: list[int]) -> Placement | Infeasible:
        scratch = _Scratch(snapshot)
        for (pod, shape), row in zip(gang.pods, rows, strict=False):
            scratch.take(pod, row, shape)
        if len(scratch.taken) < gang.need:
            return _infeasible(snapshot, gang, "does not fit")
        return scratch.placement(gang, _domain_choice(snapshot, gang, rows))


def _domain_sums(ids: np.ndarray, counts: np.ndarray, scope: np.ndarray) -> dict[int, int]:
    valid = scope & (ids >= 0)
    sums = np.bincount(ids[valid], weights=counts[valid]).astype(np.int64)
    return {int(domain): int(total) for domain, total in enumerate(sums) if total > 0}


def _best_fit_units(units: np.ndarray, capacity: np.ndarray, want: int) -> list[int]:
    """Units (domains or nodes) to hold ``want`` pods, one entry per pod: largest first until the rest
    fits into one unit, then the tightest unit that holds the rest."""
    order = np.lexsort((units, -capacity))
    chosen: list[int] = []
    remaining = want
    for position, index in enumerate(order):
        if remaining <= 0:
            break
        rest = order[position:]
        fitting = rest[capacity[rest] >= remaining]
        if len(fitting):
            tightest = fitting[np.lexsort((units[fitting], capacity[fitting]))[0]]
            chosen += [int(units[tightest])] * remaining
            return chosen
        take = int(capacity[index])
        chosen += [int(units[index])] * take
        remaining -= take
    return chosen


# -- first fit and random ------------------------------------------------------------------------------


class FirstFit:
    """Domains and nodes in name order; each node filled before the next."""

    def __init__(self, *, seed: int = 0, shuffle: bool = False) -> None:
        self.random = random.Random(seed)
        self.shuffle = shuffle

    def __call__(self, snapshot: Snapshot, request: GangRequest, *, max_tries: int = 16) -> Placement | Infeasible:
        gang = _Gang.of(snapshot, request)
        key = gang.key
        scopes: list[np.ndarray | None] = []
        if key is not None:
            ids = snapshot.label(key).ids
            domains = [int(d) for d in np.unique(ids[ids >= 0])]
            if gang.pinned:
                domains = [int(ids[gang.pinned[0]])]
            if self.shuffle:
                self.random.shuffle(domains)
            scopes = [ids == domain for domain in domains]
        if key is None or request.preferred:
            scopes.append(None)
        for scope in scopes:
            placed = self._fill(snapshot, gang, scope)
            if placed is not None:
                return placed
        return _infeasible(snapshot, gang, f"fits in no single {key}" if key else "does not fit")

    def _fill(self, snapshot: Snapshot, gang: _Gang, scope: np.ndarray | None) -> Placement | None:
        scratch = _Scratch(snapshot)
        for index, (pod, shape) in enumerate(gang.pods):
            candidates = np.flatnonzero(scratch.fits(shape, scope) > 0)
            if not len(candidates):
                if index >= gang.need:
                    break
                return None
            row = int(candidates[self.random.randrange(len(candidates))] if self.shuffle else candidates[0])
            scratch.take(pod, row, shape)
        rows = [row for _, row, _ in scratch.taken]
        return scratch.placement(gang, _domain_choice(snapshot, gang, rows or gang.pinned))


def phalanx(snapshot: Snapshot, request: GangRequest, *, max_tries: int = 16) -> Placement | Infeasible:
    return place(snapshot, request, max_tries=max_tries)


def algorithms(seed: int = 0) -> dict[str, Placer]:
    """Every algorithm by its name in the reports, fresh (the stateful ones start over)."""
    return {
        "phalanx": phalanx,
        "kube-least": KubeScheduler("least", seed=seed),
        "kube-most": KubeScheduler("most", seed=seed),
        "upstream-tas": UpstreamTAS(seed=seed),
        "kueue-bestfit": KueueBestFit(),
        "first-fit": FirstFit(),
        "random": FirstFit(seed=seed, shuffle=True),
    }
