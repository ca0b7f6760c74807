"""Choosing victims for a gang that does not fit: the fewest, least important whole units, inside one domain.

Victims come in *units* (:class:`Unit`): a whole gang, one pod of a gang's surplus above its minimum, or
a plain pod. The caller builds them (it knows gangs, priorities and disruption budgets); this module
decides which to evict, with the same engine that places gangs, in these steps:

1. Scope. A gang that requires one domain of a label key (a rack, a block, an NVLink clique) gets
   victims inside one domain of that key; any other gang inside the whole cluster.
2. Prune domains, vectorized: evicting every candidate below the preemptor's priority (``evictable``,
   summed per node) must free enough room in the domain for each pod shape of the gang's minimum.
   The survivors are ranked by an estimate (clear the domain's cheapest nodes first until the gang
   fits: the highest priority and the pods that takes), and the first ``max_domains`` are examined.
3. Per domain, greedily: add units in an order (cheapest nodes first; or lowest priority first, the
   surplus before whole gangs, units a disruption budget protects last) until the domain's free room
   could hold the minimum; then the reprieve pass gives back each chosen unit, most important first,
   whenever the rest still make room. The best few domains are searched harder: more orders, two
   reprieve orders, and a local search (drop one unit, swap one for one, two for one in small domains).
   The room check is per node and per shape (copies that fit, counted incrementally), exact for one
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
from topology.fit import FIT_CAP, ShapeFit, cumsum_by_group, domain_totals, pods_per_node, shape_fit
from topology.outcome import Infeasible, Placement
from topology.place import DEFAULT_MAX_TRIES, place
from topology.reasons import plural, short_name
from topology.request import GangRequest, PodShape
from topology.snapshot import Snapshot

#: Candidate domains examined per decision, the cheapest-looking first (``_Search._estimate``).
DEFAULT_MAX_DOMAINS = 4
#: Domains whose plans are refined (more greedy orders, a swap search) after the first ranking.
REFINED_DOMAINS = 1
#: Up to this many units in all the candidate domains, every domain is refined and searched locally.
SMALL_CHOICE_UNITS = 200
#: Two-for-one swaps are tried when (chosen units)^2 x (other units) stays below this many room checks.
PAIR_SWAP_BUDGET = 4000
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


#: ``Victims.domain`` when the victims were chosen anywhere (the gang requires no domain).
CLUSTER = "the cluster"


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
    node_cost: tuple[IntArray, IntArray] | None = None,
    max_domains: int = DEFAULT_MAX_DOMAINS,
    max_tries: int = DEFAULT_MAX_TRIES,
) -> Victims | NoVictims:
    """The best set of victims whose eviction lets ``request``'s minimum fit, or why there is none.

    evictable : ndarray of shape (n_nodes, n_resources), dtype=int64
        Requests of the pods that may be evicted for this gang, summed per node (``RunningPods.below``).
    budgets : disruptions each PodDisruptionBudget still allows, by the names ``VictimPod.budgets`` use.
    node_cost : per node, the highest priority among its candidates (-1 for none) and how many there
        are (``RunningPods.cheapest``): domains are examined in the order these estimate, cheapest first.
    """
    return _Search(
        snapshot,
        request,
        evictable=evictable,
        units_on=units_on,
        budgets=budgets or {},
        node_cost=node_cost,
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
        node_cost: tuple[IntArray, IntArray] | None,
        max_domains: int,
        max_tries: int,
    ) -> None:
        self.snapshot = snapshot
        self.request = request
        self.evictable = evictable
        self.units_on = units_on
        self.budgets = budgets
        self.node_cost = node_cost
        self.max_domains = max_domains
        self.max_tries = max_tries
        self.need = _need(snapshot, request)
        self._units: dict[int, list[Unit]] = {}
        self._layouts: dict[int, _Layout] = {}
        self.importance = _least_important_first(budgets)
        self._node_ranks: dict[int, dict[str, int]] = {}

    def _units_in(self, domains: Domains, domain: int) -> tuple[IntArray, list[Unit], _Layout]:
        """A domain's rows, its candidate units and their layout (asked for once per domain)."""
        rows = domains.members(domain)
        if domain not in self._units:
            self._units[domain] = list(self.units_on(rows))
            self._layouts[domain] = _Layout(self.snapshot, rows)
        return rows, self._units[domain], self._layouts[domain]

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
            plan = self._cheap_plan(domains, domain, quick=True)
            if plan is not None:
                plans.append(plan)
        plans.sort(key=lambda plan: (plan.rank, plan.domain))
        # The few best domains are searched harder (more orders, then a swap search); the rest keep the
        # first plan, which is what they are ranked by.
        # When the choice is small (few units in all), every domain is refined and searched locally; in a
        # large one, the best few are refined and the best one searched.
        small = sum(len(self._units[plan.domain]) for plan in plans) <= SMALL_CHOICE_UNITS
        refined = len(plans) if small else REFINED_DOMAINS
        for i, plan in enumerate(plans[:refined]):
            better = self._cheap_plan(domains, plan.domain, quick=False)
            if better is not None and better.rank < plan.rank:
                plans[i] = better
        plans.sort(key=lambda plan: (plan.rank, plan.domain))
        improved = len(plans) if small else 1
        plans[:improved] = [self._improved(domains, plan) for plan in plans[:improved]]
        plans.sort(key=lambda plan: (plan.rank, plan.domain))
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
        highest, pods = self._estimate(domains, free, possible)
        order = np.lexsort((candidates, shortfall[candidates], pods[candidates], highest[candidates]))
        return candidates[order][: self.max_domains]

    def _estimate(self, domains: Domains, free: IntArray, possible: IntArray) -> tuple[IntArray, IntArray]:
        """Per domain, a guess at the highest victim priority and the victim pods: clear its nodes cheapest
        first (``node_cost``) until the first shape of the gang fits. Zeros when there is nothing to go by."""
        zeros = np.zeros(domains.n_domains, dtype=np.int64)
        if self.node_cost is None or not self.need.shapes:
            return zeros, zeros
        highest, count = self.node_cost
        fit, needed = self.need.shapes[0]
        now = pods_per_node(free, fit)
        gain = pods_per_node(possible, fit) - now
        deficit = np.maximum(needed - domain_totals(domains.ids, now, domains.n_domains), 0)
        inside = np.flatnonzero(domains.ids >= 0)
        order = inside[np.lexsort((count[inside], highest[inside], domains.ids[inside]))]
        ids = domains.ids[order].astype(np.int64)
        starts = np.searchsorted(ids, np.arange(domains.n_domains))
        within = cumsum_by_group(gain[order], starts, ids)
        pods_within = cumsum_by_group(count[order], starts, ids)
        enough = within >= deficit[ids]
        first = np.full(domains.n_domains, -1, dtype=np.int64)
        hits = np.flatnonzero(enough)
        if len(hits):
            unique, index = np.unique(ids[hits], return_index=True)
            first[unique] = hits[index]
        never = np.int64(1 << 40)  # no guess: examined last
        at = np.maximum(first, 0)
        # Nodes are in ascending cost within a domain: the last one needed has the highest priority.
        guess_highest = np.where(first >= 0, highest[order][at], never)
        guess_pods = np.where(first >= 0, pods_within[at], never)
        return guess_highest.astype(np.int64), guess_pods.astype(np.int64)

    # -- step 3: a plan per domain, with the per-node room check -----------------------------------

    def _cheap_plan(self, domains: Domains, domain: int, *, quick: bool) -> _Plan | None:
        """The best-ranked plan of a few greedy orders, each trimmed by two reprieve orders.

        The first order clears nodes one by one, cheapest first (lowest highest priority on the node, then
        fewest pods, then the most recently started): pods need room on nodes, and evicting a little on
        every node helps no one. The others take lower priorities first and a gang's surplus before whole
        gangs, across the domain; among equals, one
        takes the most recently started first, one the smallest units (fewest pods for the room), one the
        units that lie most inside this domain (least room wasted elsewhere), and one leaves every unit a
        disruption budget protects for last, whatever its priority. Reprieve gives back the most important
        first (kube-scheduler's order), or the largest first (fewest pods evicted). ``quick``: the first
        order and reprieve only."""
        rows, units, layout = self._units_in(domains, domain)
        base = self.importance
        node_rank = self._cheapest_nodes_first(units, layout)
        orders: list[Callable[[Unit], tuple[object, ...]]] = [
            lambda unit: (node_rank.get(unit.key, len(node_rank)), *base(unit)),
        ]
        if not quick:
            inside = set(rows.tolist())
            outside = {unit.key: _share_outside(unit, inside, self.snapshot) for unit in units}
            orders += [
                base,
                lambda unit: (*base(unit)[:3], len(unit.pods), *base(unit)[3:]),
                lambda unit: (*base(unit)[:3], outside[unit.key], len(unit.pods), *base(unit)[3:]),
                lambda unit: (base(unit)[2], *base(unit)),
            ]
        best: _Plan | None = None
        seen: set[tuple[str, ...]] = set()
        for order in orders:
            room = _Room(self.snapshot, rows, self.need, layout)
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
            for largest_first in (False,) if quick else (False, True):
                trimmed = _Room(self.snapshot, rows, self.need, layout)
                for unit in chosen:
                    trimmed.evict(unit)
                kept = self._reprieve(chosen, trimmed.spare, largest_first=largest_first)
                plan = _Plan(domain, kept, self._rank(kept))
                if best is None or plan.rank < best.rank:
                    best = plan
        return best

    def _cheapest_nodes_first(self, units: list[Unit], layout: _Layout) -> dict[str, int]:
        """Each unit's place when the domain's nodes are ordered cheapest to clear first."""
        cached = self._node_ranks.get(id(layout))
        if cached is not None:
            return cached
        cost: dict[int, list[float]] = {}
        for unit in units:
            for pod in unit.pods:
                where = layout.of(pod)
                if where is not None:
                    entry = cost.setdefault(where[0], [0.0, 0.0, 0.0])
                    entry[0] = max(entry[0], unit.priority)
                    entry[1] += 1
                    entry[2] = min(entry[2], -unit.started)
        order = {row: i for i, row in enumerate(sorted(cost, key=lambda row: (*cost[row], row)))}
        ranks = {}
        for unit in units:
            rows = [where[0] for pod in unit.pods if (where := layout.of(pod)) is not None]
            ranks[unit.key] = min((order[row] for row in rows), default=len(order))
        self._node_ranks[id(layout)] = ranks
        return ranks

    def _improved(self, domains: Domains, plan: _Plan) -> _Plan:
        """A local search on the best plans: drop a chosen unit, swap one for another, or (in small
        domains) swap two for one, while the rank improves. Greedy orders miss sets where one larger unit
        replaces two smaller ones, or a newer unit an older one of the same cost; this finds them."""
        rows, units, layout = self._units_in(domains, plan.domain)
        current = list(plan.units)
        rank = plan.rank
        for _ in range(len(current) + 2):
            room = _Room(self.snapshot, rows, self.need, layout)
            for unit in current:
                room.evict(unit)
            keys = {unit.key for unit in current}
            others = [unit for unit in units if unit.key not in keys]
            best: tuple[tuple[int, int, int, int, float], list[Unit]] | None = None

            def consider(option: list[Unit], bar: tuple[int, int, int, int, float] = rank) -> None:
                nonlocal best
                option_rank = self._rank(option)
                if option_rank < bar and (best is None or option_rank < best[0]):
                    best = (option_rank, option)

            pairs: list[tuple[Unit, ...]] = [(unit,) for unit in current]
            if len(current) * len(current) * len(others) <= PAIR_SWAP_BUDGET:
                pairs += [(a, b) for i, a in enumerate(current) for b in current[i + 1 :]]
            for removed in pairs:
                for unit in removed:
                    room.restore(unit)
                rest = [unit for unit in current if unit not in removed]
                if room.fits():
                    consider(rest)
                for other in others:
                    room.evict(other)
                    if room.fits():
                        consider([*rest, other])
                    room.restore(other)
                for unit in removed:
                    room.evict(unit)
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
        order = sorted(chosen, key=self.importance, reverse=True)
        if largest_first:
            order.sort(key=lambda unit: -len(unit.pods))
        else:
            order = [u for u in order if self.importance(u)[2]] + [u for u in order if not self.importance(u)[2]]
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
        """The slow path: ``place`` decides (for gangs the per-node room check cannot judge: parts that
        each need their own rack inside the domain, mixed shapes). The shortest prefix of the units, least
        important first, that lets the gang place is found by bisection; then the reprieve pass, with
        ``place`` judging each unit given back (at most ``MAX_UNITS_PLACED_ONE_BY_ONE`` of them)."""
        units = sorted(self._units_in(domains, domain)[1], key=self.importance)
        if not units or self._place_without(units) is None:
            return None
        low, high = 0, len(units)  # units[:high] lets it place
        while low < high:
            middle = (low + high) // 2
            if self._place_without(units[:middle]) is not None:
                high = middle
            else:
                low = middle + 1
        chosen = list(units[:high])
        if len(chosen) > MAX_UNITS_PLACED_ONE_BY_ONE:
            return None

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
        where = CLUSTER if key is None else f"{short_name(key)} {domains.label(domain)}"
        return Victims(
            units=tuple(units),
            placement=placed,
            domain=where,
            violations=_violations(_union(units), self.budgets),
            tried=tried,
        )


class _Room:
    """The free room of one domain's nodes as units are evicted and given back (pods counted once).

    The room check runs thousands of times per decision, on a few dozen nodes: counts are kept
    incrementally in plain Python (each eviction touches one node's row), so a check is O(shapes)."""

    def __init__(self, snapshot: Snapshot, rows: IntArray, need: _Need, layout: _Layout) -> None:
        self.layout = layout
        free = snapshot.free[rows]
        self.free: list[list[int]] = free.tolist()
        self.columns = [int(c) for c in np.flatnonzero(need.total)]
        self.wanted = [int(need.total[c]) for c in self.columns]
        self.sums = [int(free[:, c].sum()) for c in self.columns]
        self.positions = {column: i for i, column in enumerate(self.columns)}
        self.shapes = [
            (
                list(zip(fit.columns.tolist(), fit.quotas.tolist(), strict=True)),
                count,
                fit.eligibility.mask[rows].tolist(),
            )
            for fit, count in need.shapes
            if not fit.missing
        ]
        self.impossible = any(fit.missing for fit, _ in need.shapes)
        self.copies = [
            [self._copies(row, quotas) if allowed[row] else 0 for row in range(len(self.free))]
            for quotas, _, allowed in self.shapes
        ]
        self.totals = [sum(copies) for copies in self.copies]
        self.cover: Counter[str] = Counter()

    def _copies(self, row: int, quotas: list[tuple[int, int]]) -> int:
        values = self.free[row]
        return max(0, min(values[column] // quota for column, quota in quotas)) if quotas else FIT_CAP

    def fits(self) -> bool:
        if self.impossible:
            return False
        if any(total < count for total, (_, count, _) in zip(self.totals, self.shapes, strict=True)):
            return False
        return all(have >= want for have, want in zip(self.sums, self.wanted, strict=True))

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
        where = self.layout.of(pod)
        if where is None:
            return
        row, vector = where
        values = self.free[row]
        for column, amount in vector:
            values[column] += sign * amount
            position = self.positions.get(column)
            if position is not None:
                self.sums[position] += sign * amount
        for i, (quotas, _, allowed) in enumerate(self.shapes):
            if allowed[row]:
                now = self._copies(row, quotas)
                self.totals[i] += now - self.copies[i][row]
                self.copies[i][row] = now


_UNSEEN = object()


class _Layout:
    """Where each victim pod sits in one domain's rows, and its request as (column, amount) pairs."""

    def __init__(self, snapshot: Snapshot, rows: IntArray) -> None:
        self.snapshot = snapshot
        self.local = {int(row): i for i, row in enumerate(rows.tolist())}
        self._found: dict[str, tuple[int, tuple[tuple[int, int], ...]] | None] = {}
        self._pairs: dict[tuple[tuple[str, int], ...], tuple[tuple[int, int], ...]] = {}

    def of(self, pod: VictimPod) -> tuple[int, tuple[tuple[int, int], ...]] | None:
        found = self._found.get(pod.key, _UNSEEN)
        if found is _UNSEEN:
            row = self.snapshot.index_of(pod.node)
            local = self.local.get(row) if row is not None else None
            found = None if local is None else (local, self._pairs_of(pod.requests))
            self._found[pod.key] = found
        return found  # type: ignore[return-value]

    def _pairs_of(self, requests: tuple[tuple[str, int], ...]) -> tuple[tuple[int, int], ...]:
        pairs = self._pairs.get(requests)
        if pairs is None:
            vector = self.snapshot.request_vector(requests).vector
            pairs = self._pairs[requests] = tuple((int(c), int(vector[c])) for c in np.flatnonzero(vector))
        return pairs


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


_Importance = tuple[int, int, int, float, str]


def _least_important_first(budgets: Mapping[str, int]) -> Callable[[Unit], _Importance]:
    """The sort key of units, least important first (computed once per unit: sorts call it often)."""
    keys: dict[str, _Importance] = {}

    def key(unit: Unit) -> _Importance:
        found = keys.get(unit.key)
        if found is None:
            protected = int(bool(budgets) and _protected(unit, budgets))
            found = keys[unit.key] = (unit.priority, 0 if unit.surplus else 1, protected, -unit.started, unit.key)
        return found

    return key


def _protected(unit: Unit, budgets: Mapping[str, int]) -> bool:
    """Whether evicting the unit alone already goes beyond what one of its budgets allows."""
    covered = Counter(name for pod in unit.pods for name in pod.budgets)
    return any(count > budgets.get(name, count) for name, count in covered.items())


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
