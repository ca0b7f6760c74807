"""Choosing victims for a gang that does not fit: the fewest, least important whole units, inside one domain.

Victims come in *units* (:class:`Unit`): a whole gang, one pod of a gang's surplus above its minimum, or
a plain pod. The caller builds them (it knows gangs, priorities and disruption budgets); this module
decides which to evict, with the same engine that places gangs, in these steps:

1. Scope. A gang that requires one domain of a label key (a rack, a block, an NVLink clique) gets
   victims inside one domain of that key; any other gang inside the whole cluster.
2. Prune domains, vectorized: evicting every candidate below the preemptor's priority (``evictable``,
   summed per node) must free enough room in the domain for each pod shape of the gang's minimum.
   The survivors are tried closest-to-fitting first, at most ``max_domains`` of them.
3. Per domain, greedily: add units least important first (lowest priority; the surplus before whole
   gangs; units without a disruption budget to spare before those with one; the most recently started
   first) until the domain's free room could hold the minimum. Then the reprieve pass: give back each
   chosen unit, most important first, whenever the rest still make room. This is the domain's plan.
   The room check is per node and per shape (``pods_per_node`` over the domain's rows), exact for one
   shape without constraints inside the domain and optimistic otherwise.
4. Rank the plans as kube-scheduler ranks nodes: fewest budget violations, lowest highest-victim
   priority, smallest sum of victim priorities, fewest victim pods, most recently started victims.
5. Verify in rank order with :func:`topology.place` on the snapshot without the plan's victims; the
   first plan that places the whole minimum wins. A plan the room check was too optimistic about is
   searched again with ``place`` itself deciding each step (nested constraints, mixed shapes).

A unit whose gang's other unit is also chosen (a gang's surplus pod, and the gang as a whole) is counted
once: victims are a set of pods, and every count here is over that set.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from topology.domains import Domains, IntArray
from topology.explain import plural, short_name
from topology.fit import ShapeFit, domain_totals, pods_per_node, shape_fit
from topology.outcome import Infeasible, Placement
from topology.place import DEFAULT_MAX_TRIES, place
from topology.request import GangRequest, PodShape
from topology.snapshot import Snapshot

#: Candidate domains examined per decision, closest to fitting first.
DEFAULT_MAX_DOMAINS = 16
#: A plan that the per-node room check cannot decide is searched with ``place`` at every step; beyond
#: this many units in one domain that would take too long, and the domain is skipped.
MAX_UNITS_PLACED_ONE_BY_ONE = 256


@dataclass(frozen=True, slots=True)
class VictimPod:
    key: str
    node: str
    requests: tuple[tuple[str, int], ...]
    #: The PodDisruptionBudgets that select it.
    budgets: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Unit:
    """Pods evicted together: a whole gang (every bound pod), one surplus pod of a gang, or a plain pod."""

    key: str
    pods: tuple[VictimPod, ...]
    priority: int
    #: The latest start among its pods (seconds since the epoch): the more recent, the less work is lost.
    started: float
    #: The gang it belongs to (a plain pod's own key), for counting victims by gang.
    gang: str
    surplus: bool = False


@dataclass(frozen=True, slots=True)
class Victims:
    """The chosen units and where the preemptor will go once they are gone."""

    units: tuple[Unit, ...]
    placement: Placement
    #: The domain the victims were chosen in ("rack r3"), or "the cluster".
    domain: str
    violations: int
    #: Domains examined.
    tried: int

    @property
    def pods(self) -> tuple[VictimPod, ...]:
        return _union(self.units)

    def by_gang(self) -> dict[str, int]:
        """Victim pods counted by the gang they belong to."""
        gang_of = {pod.key: unit.gang for unit in self.units for pod in unit.pods}
        return dict(Counter(gang_of[pod.key] for pod in self.pods))


@dataclass(frozen=True, slots=True)
class NoVictims:
    """Why preemption cannot help."""

    reason: str
    tried: int = 0
    #: False when preemption was not even in question (nothing runs below the gang's priority, or it is
    #: switched off): not worth a sentence in the gang's reason.
    considered: bool = True


#: Units that have a pod on any of the given node rows (the caller decides priority and gang rules).
UnitSource = Callable[[IntArray], Sequence[Unit]]


def choose_victims(
    snapshot: Snapshot,
    request: GangRequest,
    *,
    evictable: IntArray,
    units_on: UnitSource,
    budgets: Mapping[str, int] | None = None,
    max_domains: int = DEFAULT_MAX_DOMAINS,
    max_tries: int = DEFAULT_MAX_TRIES,
) -> Victims | NoVictims:
    """The best set of victims whose eviction lets ``request``'s minimum fit, or why there is none.

    evictable : ndarray of shape (n_nodes, n_resources), dtype=int64
        Requests of the pods that may be evicted for this gang, summed per node (``RunningPods.below``).
    budgets : disruptions each PodDisruptionBudget still allows, by the names ``VictimPod.budgets`` use.
    """
    return _Search(
        snapshot,
        request,
        evictable=evictable,
        units_on=units_on,
        budgets=budgets or {},
        max_domains=max_domains,
        max_tries=max_tries,
    ).run()


@dataclass(slots=True)
class _Plan:
    domain: int
    units: list[Unit]
    rank: tuple[int, int, int, int, float]


@dataclass(slots=True)
class _Need:
    """A lower bound of what the gang's minimum needs: pods per shape and their summed requests."""

    shapes: list[tuple[ShapeFit, int]] = field(default_factory=list)
    total: IntArray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))


class _Search:
    def __init__(
        self,
        snapshot: Snapshot,
        request: GangRequest,
        *,
        evictable: IntArray,
        units_on: UnitSource,
        budgets: Mapping[str, int],
        max_domains: int,
        max_tries: int,
    ) -> None:
        self.snapshot = snapshot
        self.request = request
        self.evictable = evictable
        self.units_on = units_on
        self.budgets = budgets
        self.max_domains = max_domains
        self.max_tries = max_tries
        self.need = _need(snapshot, request)

    def run(self) -> Victims | NoVictims:
        key = self.request.required
        domains = self.snapshot.domains(() if key is None else (key,))
        where = "the cluster" if key is None else f"one {key}"
        if domains.n_domains == 0:
            return NoVictims(f"no node has the label {key}")
        candidates = self._candidates(domains)
        if not len(candidates):
            return NoVictims(f"evicting every pod of lower priority would not make room for its minimum in {where}")
        plans = []
        for domain in candidates.tolist():
            plan = self._cheap_plan(domains, domain)
            if plan is not None:
                plans.append(plan)
        plans.sort(key=lambda plan: (plan.rank, plan.domain))
        if plans:
            plans[0] = self._improved(domains, plans[0])
        for plan in plans:
            found = self._verified(domains, plan, len(candidates))
            if found is not None:
                return found
        for domain in candidates.tolist():  # the room check was too optimistic everywhere: place decides
            found = self._placed_plan(domains, domain, len(candidates))
            if found is not None:
                return found
        tried = plural(len(candidates), "domain" if key is None else short_name(key))
        return NoVictims(
            f"no set of lower-priority pods in {where} makes room for its minimum ({tried} examined)",
            len(candidates),
        )

    # -- step 2: which domains ---------------------------------------------------------------------

    def _candidates(self, domains: Domains) -> IntArray:
        free = self.snapshot.free
        possible = free + self.evictable
        ok = np.ones(domains.n_domains, dtype=np.bool_)
        shortfall = np.zeros(domains.n_domains, dtype=np.int64)
        for fit, count in self.need.shapes:
            at_best = domain_totals(domains.ids, pods_per_node(possible, fit), domains.n_domains)
            now = domain_totals(domains.ids, pods_per_node(free, fit), domains.n_domains)
            ok &= at_best >= count
            shortfall += np.maximum(count - now, 0)
        if len(self.need.total):
            columns = np.flatnonzero(self.need.total)
            for column in columns.tolist():
                room = domain_totals(domains.ids, possible[:, column], domains.n_domains)
                ok &= room >= self.need.total[column]
        candidates = np.flatnonzero(ok)
        order = np.lexsort((candidates, shortfall[candidates]))
        return candidates[order][: self.max_domains]

    # -- step 3: a plan per domain, with the per-node room check -----------------------------------

    def _cheap_plan(self, domains: Domains, domain: int) -> _Plan | None:
        """The best-ranked plan of a few greedy orders, each trimmed by two reprieve orders.

        Every order takes lower priorities first and a gang's surplus before whole gangs; among equals, one
        takes the most recently started first, one the smallest units (fewest pods for the room), one the
        units that lie most inside this domain (least room wasted elsewhere), and one leaves every unit a
        disruption budget protects for last, whatever its priority. Reprieve gives back the most important
        first (kube-scheduler's order), or the largest first (fewest pods evicted)."""
        rows = domains.members(domain)
        units = list(self.units_on(rows))
        inside = set(rows.tolist())
        outside = {unit.key: _share_outside(unit, inside, self.snapshot) for unit in units}
        base = _least_important_first(self.budgets)
        orders: list[Callable[[Unit], tuple[object, ...]]] = [
            base,
            lambda unit: (*base(unit)[:3], len(unit.pods), *base(unit)[3:]),
            lambda unit: (*base(unit)[:3], outside[unit.key], len(unit.pods), *base(unit)[3:]),
            lambda unit: (base(unit)[2], *base(unit)),
        ]
        best: _Plan | None = None
        seen: set[tuple[str, ...]] = set()
        for order in orders:
            room = _Room(self.snapshot, rows, self.need)
            chosen: list[Unit] = []
            for unit in sorted(units, key=order):
                if room.fits():
                    break
                room.evict(unit)
                chosen.append(unit)
            if not room.fits():
                return None  # every order ends with every unit: none fits
            picked = tuple(sorted(unit.key for unit in chosen))
            if picked in seen:
                continue
            seen.add(picked)
            for largest_first in (False, True):
                trimmed = _Room(self.snapshot, rows, self.need)
                for unit in chosen:
                    trimmed.evict(unit)
                kept = self._reprieve(chosen, trimmed.spare, largest_first=largest_first)
                plan = _Plan(domain, kept, self._rank(kept))
                if best is None or plan.rank < best.rank:
                    best = plan
        return best

    def _improved(self, domains: Domains, plan: _Plan) -> _Plan:
        """A local search on the best plan: swap one chosen unit for one other (or drop it) while the rank
        improves. Greedy orders miss sets where one larger unit replaces two smaller ones; this finds them."""
        rows = domains.members(plan.domain)
        units = list(self.units_on(rows))
        current = list(plan.units)
        rank = plan.rank
        for _ in range(len(current) + 2):
            room = _Room(self.snapshot, rows, self.need)
            for unit in current:
                room.evict(unit)
            keys = {unit.key for unit in current}
            best: tuple[tuple[int, int, int, int, float], list[Unit]] | None = None
            for out in current:
                room.restore(out)
                rest = [unit for unit in current if unit is not out]
                options = [rest] if room.fits() else []
                for other in units:
                    if other.key in keys:
                        continue
                    room.evict(other)
                    if room.fits():
                        options.append([*rest, other])
                    room.restore(other)
                room.evict(out)
                for option in options:
                    option_rank = self._rank(option)
                    if option_rank < rank and (best is None or option_rank < best[0]):
                        best = (option_rank, option)
            if best is None:
                break
            rank, current = best
        return _Plan(plan.domain, _without_subsumed(current), rank)

    def _reprieve(
        self, chosen: list[Unit], spare: Callable[[Unit], bool], *, largest_first: bool = False
    ) -> list[Unit]:
        """Give back each unit, most important first, when the preemptor fits without it; the rest stay.

        Units whose pods a disruption budget protects are given back first, as kube-scheduler does; with
        ``largest_first``, units with the most pods are tried first instead."""
        order = sorted(chosen, key=_least_important_first(self.budgets), reverse=True)
        if largest_first:
            order.sort(key=lambda unit: -len(unit.pods))
        else:
            order = [u for u in order if _protected(u, self.budgets)] + [
                u for u in order if not _protected(u, self.budgets)
            ]
        reprieved = {unit.key for unit in order if spare(unit)}
        return _without_subsumed([unit for unit in chosen if unit.key not in reprieved])

    def _rank(self, units: Sequence[Unit]) -> tuple[int, int, int, int, float]:
        priority_of = {pod.key: unit.priority for unit in units for pod in unit.pods}
        pods = _union(units)
        return (
            _violations(pods, self.budgets),
            max((unit.priority for unit in units), default=0),
            sum(priority_of[pod.key] for pod in pods),
            len(pods),
            -max((unit.started for unit in units), default=0.0),
        )

    # -- step 5: the real engine decides ----------------------------------------------------------

    def _verified(self, domains: Domains, plan: _Plan, tried: int) -> Victims | None:
        placed = self._place_without(plan.units)
        if placed is None:
            return None
        return self._victims(domains, plan.domain, plan.units, placed, tried)

    def _placed_plan(self, domains: Domains, domain: int, tried: int) -> Victims | None:
        """The slow path: ``place`` decides each step (for gangs the per-node room check cannot judge)."""
        units = sorted(self.units_on(domains.members(domain)), key=_least_important_first(self.budgets))
        if not units or len(units) > MAX_UNITS_PLACED_ONE_BY_ONE:
            return None
        if self._place_without(units) is None:
            return None
        chosen = list(units)

        def spare(unit: Unit) -> bool:
            rest = [other for other in chosen if other is not unit]
            if self._place_without(rest) is None:
                return False
            chosen.remove(unit)
            return True

        kept = self._reprieve(chosen, spare)
        placed = self._place_without(kept)
        assert placed is not None  # the last successful check was made with exactly these units
        return self._victims(domains, domain, kept, placed, tried)

    def _place_without(self, units: Sequence[Unit]) -> Placement | None:
        """Place the gang on the snapshot as if ``units`` were gone; the snapshot is restored."""
        rows, vectors = self._layout(_union(units))
        free = self.snapshot.free
        np.add.at(free, rows, vectors)
        try:
            placed = place(self.snapshot, self.request, max_tries=self.max_tries)
        finally:
            np.subtract.at(free, rows, vectors)
        return None if isinstance(placed, Infeasible) else placed

    def _layout(self, pods: Iterable[VictimPod]) -> tuple[IntArray, IntArray]:
        rows: list[int] = []
        vectors: list[IntArray] = []
        for pod in pods:
            row = self.snapshot.index_of(pod.node)
            if row is not None:
                rows.append(row)
                vectors.append(self.snapshot.request_vector(pod.requests).vector)
        width = len(self.snapshot.resources)
        matrix = np.stack(vectors) if vectors else np.zeros((0, width), dtype=np.int64)
        return np.array(rows, dtype=np.int64), matrix

    def _victims(self, domains: Domains, domain: int, units: list[Unit], placed: Placement, tried: int) -> Victims:
        key = self.request.required
        where = "the cluster" if key is None else f"{short_name(key)} {domains.label(domain)}"
        return Victims(
            units=tuple(units),
            placement=placed,
            domain=where,
            violations=_violations(_union(units), self.budgets),
            tried=tried,
        )


class _Room:
    """The free room of one domain's nodes as units are evicted and given back (pods counted once)."""

    def __init__(self, snapshot: Snapshot, rows: IntArray, need: _Need) -> None:
        self.snapshot = snapshot
        self.need = need
        self.free = snapshot.free[rows].copy()
        self.local = {int(row): i for i, row in enumerate(rows.tolist())}
        self.allowed = [fit.eligibility.mask[rows] for fit, _ in need.shapes]
        self.cover: Counter[str] = Counter()

    def fits(self) -> bool:
        total = self.need.total
        if len(total) and (self.free.sum(axis=0) < total).any():
            return False
        for (fit, count), allowed in zip(self.need.shapes, self.allowed, strict=True):
            copies = _copies(self.free, fit)
            if int(copies[allowed].sum()) < count:
                return False
        return True

    def evict(self, unit: Unit) -> None:
        for pod in unit.pods:
            self.cover[pod.key] += 1
            if self.cover[pod.key] == 1:
                self._move(pod, 1)

    def restore(self, unit: Unit) -> None:
        for pod in unit.pods:
            self.cover[pod.key] -= 1
            if self.cover[pod.key] == 0:
                self._move(pod, -1)

    def spare(self, unit: Unit) -> bool:
        """Give ``unit`` back if the room still fits without it."""
        self.restore(unit)
        if self.fits():
            return True
        self.evict(unit)
        return False

    def _move(self, pod: VictimPod, sign: int) -> None:
        row = self.snapshot.index_of(pod.node)
        local = self.local.get(row) if row is not None else None
        if local is not None:
            self.free[local] += sign * self.snapshot.request_vector(pod.requests).vector


def _copies(free: IntArray, fit: ShapeFit) -> IntArray:
    """Copies of the shape per row of ``free`` (eligibility applied by the caller)."""
    if fit.missing:
        return np.zeros(free.shape[0], dtype=np.int64)
    copies = np.full(free.shape[0], np.iinfo(np.int64).max, dtype=np.int64)
    for column, quota in zip(fit.columns.tolist(), fit.quotas.tolist(), strict=True):
        np.minimum(copies, free[:, column] // quota, out=copies)
    return np.maximum(copies, 0)


def _need(snapshot: Snapshot, request: GangRequest) -> _Need:
    """Pods per shape the minimum certainly needs beyond members already running (a lower bound)."""
    counts: Counter[PodShape] = Counter()
    _count_need(request, counts)
    total = np.zeros(len(snapshot.resources), dtype=np.int64)
    shapes = []
    for shape, count in sorted(counts.items(), key=lambda item: repr(item[0])):
        if count <= 0:
            continue
        fit = shape_fit(snapshot, shape)
        shapes.append((fit, count))
        total += snapshot.request_vector(shape.requests).vector * count
    return _Need(shapes=shapes, total=total)


def _count_need(part: GangRequest, counts: Counter[PodShape]) -> None:
    if part.is_leaf:
        shapes = {member.shape for member in part.pods}
        if part.placeholders and part.placeholder_shape is not None:
            shapes.add(part.placeholder_shape)
        if len(shapes) == 1:
            running = sum(1 for member in part.pods if member.node is not None)
            counts[next(iter(shapes))] += max(0, part.min_pods - running)
        return
    if part.min_children >= len(part.children):  # every child is needed: each one's need adds up
        for child in part.children:
            _count_need(child, counts)


def _without_subsumed(units: list[Unit]) -> list[Unit]:
    """A surplus pod whose whole gang goes too is not a victim of its own."""
    covered = {pod.key for unit in units if not unit.surplus for pod in unit.pods}
    return [unit for unit in units if not (unit.surplus and all(pod.key in covered for pod in unit.pods))]


def _share_outside(unit: Unit, inside: set[int], snapshot: Snapshot) -> float:
    rows = [snapshot.index_of(pod.node) for pod in unit.pods]
    return sum(1 for row in rows if row not in inside) / max(1, len(rows))


def _least_important_first(budgets: Mapping[str, int]) -> Callable[[Unit], tuple[int, int, int, float, str]]:
    def key(unit: Unit) -> tuple[int, int, int, float, str]:
        return (unit.priority, 0 if unit.surplus else 1, int(_protected(unit, budgets)), -unit.started, unit.key)

    return key


def _protected(unit: Unit, budgets: Mapping[str, int]) -> bool:
    return any(budgets.get(name, 1) <= 0 for pod in unit.pods for name in pod.budgets)


def _violations(pods: Iterable[VictimPod], budgets: Mapping[str, int]) -> int:
    """Victim pods beyond what their disruption budgets allow (each budget counted over the whole set)."""
    covered: Counter[str] = Counter(name for pod in pods for name in pod.budgets)
    return sum(max(0, count - budgets.get(name, count)) for name, count in covered.items())


def _union(units: Iterable[Unit]) -> tuple[VictimPod, ...]:
    seen: dict[str, VictimPod] = {}
    for unit in units:
        for pod in unit.pods:
            seen.setdefault(pod.key, pod)
    return tuple(seen.values())
