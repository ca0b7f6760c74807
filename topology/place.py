"""All-or-nothing placement of one gang tree on a snapshot (docs/architecture.md).

The search, in the order the code follows:

Phase 1, capacities bottom-up (``_bounds``). For a part with a required or preferred label key, count
    per domain how many of its pods could fit there at best, one reduction over the node arrays per
    pod shape, nested through the required keys below it. Domains that cannot possibly hold the
    part's minimum are pruned without trying them. For a leaf of one shape the count is exact.
Phase 2, choose domains best-fit (``_in_best_domain``). Candidates are tried tightest first (the
    least capacity that still suffices), so that large free domains stay whole for large gangs; a
    preferred key is tried at its own level, then at each broader configured level, then anywhere.
    Tries per part are bounded; prunes and tries are counted.
Phase 3, descend (``_inside``). A leaf places its minimum inside the chosen domain, filling nodes that
    are already partly used first (tightest first) and each node before opening another; an inner
    node satisfies ``min_children`` children, hardest first, each with its own constraints, then tops
    up to its own ``min_pods``. Any failure rolls back exactly what the attempt took.
Phase 4, extras (``_extras``). Only once every minimum of the tree holds: more children and more pods,
    each inside the domains its part already uses. Extras that do not fit stay unplaced.

Pods already running (``Member.node``) count towards minimums and pin required domains.

Everything per node is numpy; Python loops run per part, per shape and per candidate domain.
The snapshot is used as scratch space and restored before returning, whatever the outcome.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from topology import exact
from topology.domains import BoolArray, Domains, FloatArray, IdArray, IntArray
from topology.fit import ShapeFit, domain_totals, shape_fit
from topology.nodes import HOSTNAME
from topology.outcome import Assignment, DomainChoice, HeldRoom, Infeasible, Placement
from topology.quantities import amount_words, counts_devices
from topology.reasons import devices_wanted, node_limit, node_reasons, plural, short_name
from topology.request import GangRequest, PodShape
from topology.snapshot import Snapshot
from topology.trial import Trial

#: Candidate domains tried per constrained part (and per level, for a preferred key) before giving up.
DEFAULT_MAX_TRIES = 16

Scope = IntArray | None  # node indices a part is confined to; None means every node


@dataclass(slots=True)
class _Failure:
    """Why a part could not be placed: ``text`` names the part, ``summary`` says the same without the
    name, for use inside the sentence of an enclosing part that tried a domain."""

    text: str
    shape: ShapeFit | None = None
    unresolvable: bool = False
    summary: str = ""

    def __post_init__(self) -> None:
        self.summary = self.summary or self.text


@dataclass(eq=False, slots=True)
class _Part:
    """Search state of one node of the request tree."""

    request: GangRequest
    label: str
    children: list[_Part]
    shapes: list[ShapeFit] = field(default_factory=list)
    #: Per shape, the member keys still unplaced, in reverse order (placement pops from the end).
    pending: list[list[str]] = field(default_factory=list)
    #: Per shape, placeholders still unplaced (a count: they are no objects), placed after the members.
    anonymous: list[int] = field(default_factory=list)
    #: Room placed for placeholders: (node indices, counts, shape index) per fill.
    held: list[tuple[IntArray, IntArray, int]] = field(default_factory=list)
    held_count: int = 0
    #: Node indices of members already running, for this leaf only.
    pinned: list[int] = field(default_factory=list)
    placed: list[tuple[str, int, int]] = field(default_factory=list)  # (pod, node index, shape index)
    satisfied: bool = False
    scope: Scope = None
    outer: Scope = None
    path: tuple[str, ...] = ()
    where: str = "the cluster"
    domain: DomainChoice | None = None
    difficulty: float = 0.0
    #: Whether the part wants more than its minimum (extra pods or extra children somewhere below it).
    elastic: bool = False
    #: Every pod the part wants, running or not (its minimum and its extras).
    total: int = 0

    def leaves(self) -> list[_Part]:
        if not self.children:
            return [self]
        return [leaf for child in self.children for leaf in child.leaves()]

    def pinned_nodes(self) -> list[int]:
        return [node for leaf in self.leaves() for node in leaf.pinned]

    def pod_count(self) -> int:
        return sum(len(leaf.placed) + len(leaf.pinned) + leaf.held_count for leaf in self.leaves())

    def waiting(self, shape_index: int) -> int:
        """Pods of one shape still to place: members, then placeholders."""
        return len(self.pending[shape_index]) + self.anonymous[shape_index]

    def any_waiting(self) -> bool:
        return any(self.waiting(i) for i in range(len(self.shapes)))


class Placer(Protocol):
    """A placement algorithm: :func:`place`, or a baseline the quality benchmark compares it with (called
    exactly as ``place`` is)."""

    def __call__(self, snapshot: Snapshot, request: GangRequest, *, max_tries: int) -> Placement | Infeasible: ...


def place(snapshot: Snapshot, request: GangRequest, *, max_tries: int = DEFAULT_MAX_TRIES) -> Placement | Infeasible:
    """Place ``request`` all-or-nothing, or explain why it cannot be placed now.

    The snapshot is left exactly as it was; commit a placement with ``snapshot.assume_placement``.
    Deterministic: the same snapshot and request give the same answer.
    """
    if max_tries < 1:
        raise ValueError("max_tries must be at least 1")
    search = _Search(snapshot, request, max_tries)
    try:
        return search.run()
    finally:
        search.trial.rollback()


class _Search:
    def __init__(self, snapshot: Snapshot, request: GangRequest, max_tries: int) -> None:
        self.snapshot = snapshot
        self.max_tries = max_tries
        self.trial = Trial(snapshot)
        self.tries = 0
        self.pruned = 0
        self._shapes: dict[PodShape, ShapeFit] = {}
        self._trialling = False
        self.root = self._build(request, f"Gang {request.key}")

    # -- setup ---------------------------------------------------------------------------------

    def _build(self, request: GangRequest, label: str) -> _Part:
        children = [self._build(child, f"part {child.key}") for child in request.children]
        part = _Part(request=request, label=label, children=children)
        if request.is_leaf:
            by_shape: dict[PodShape, list[str]] = {}
            for member in request.pods:
                if member.node is None:
                    by_shape.setdefault(member.shape, []).append(member.key)
                else:
                    row = self.snapshot.index_of(member.node)
                    if row is not None:  # a member on a node that is gone counts for nothing
                        part.pinned.append(row)
            if request.placeholders and request.placeholder_shape is not None:
                by_shape.setdefault(request.placeholder_shape, [])
            for shape, keys in by_shape.items():
                part.shapes.append(self._shape(shape))
                part.pending.append(list(reversed(keys)))
                part.anonymous.append(request.placeholders if shape == request.placeholder_shape else 0)
            biggest = max((fit.size for fit in part.shapes), default=0.0)
            part.difficulty = max(0, request.min_pods - len(part.pinned)) * min(biggest, 1e9)
            waiting = sum(part.waiting(i) for i in range(len(part.shapes)))
            part.elastic = waiting > max(0, request.min_pods - len(part.pinned))
            part.total = waiting + len(part.pinned)
        else:
            part.difficulty = sum(child.difficulty for child in children)
            part.elastic = len(children) > request.min_children or any(child.elastic for child in children)
            part.total = sum(child.total for child in children)
            # Hardest first: big children claim room before small ones fragment it. Stable for ties.
            part.children = sorted(children, key=lambda child: -child.difficulty)
        return part

    def _shape(self, shape: PodShape) -> ShapeFit:
        fit = self._shapes.get(shape)
        if fit is None:
            fit = self._shapes[shape] = shape_fit(self.snapshot, shape)
        return fit

    # -- the search ----------------------------------------------------------------------------

    def run(self) -> Placement | Infeasible:
        failure = self._satisfy(self.root, None, (), "the cluster")
        if failure is not None:
            return self._infeasible(failure)
        self._extras(self.root)
        return self._placement()

    def _satisfy(self, part: _Part, scope: Scope, path: tuple[str, ...], where: str) -> _Failure | None:
        """Place the minimum of ``part`` inside ``scope``, or change nothing and say why not.

        ``where`` names the scope in messages ("the cluster", "rack r7").
        """
        request = part.request
        if request.required is not None and request.required not in path:
            return self._in_best_domain(part, scope, path, request.required, required=True)
        if request.preferred is not None and request.preferred not in path:
            for key in self.snapshot.topology.widening(request.preferred):
                if key in path:
                    break  # an ancestor already keeps the whole part inside one such domain
                if self._in_best_domain(part, scope, path, key, required=False) is None:
                    return None
        return self._inside(part, scope, path, choice=None, where=where)

    def _in_best_domain(
        self, part: _Part, scope: Scope, path: tuple[str, ...], key: str, *, required: bool
    ) -> _Failure | None:
        """Phases 1 and 2: prune the domains of ``key``, then try the rest tightest first."""
        domains = self.snapshot.domains((*path, key))
        what = self._what(part)
        if domains.n_domains == 0:
            return _Failure(
                f"{part.label} needs {what} in one {key}, but no node has the label {key}.",
                self._first_shape(part),
                unresolvable=True,
            )
        ok, capacity, pods = self._bounds(part, domains, scope)
        found = self._candidates(part, domains, scope, key, what=what, ok=ok, pods=pods, required=required)
        if isinstance(found, _Failure):
            return found
        candidates, may_hold_all = self._tightest_first(part, domains, found, capacity=capacity, pods=pods)
        first_failure: _Failure | None = None
        fallback: int | None = None
        tried = 0

        def enter(domain: int) -> _Failure | None:
            members = domains.members(domain)
            inner = members if scope is None else np.intersect1d(scope, members, assume_unique=True)
            choice = DomainChoice(gang=part.request.key, key=key, value=domains.label(domain), required=required)
            return self._inside(
                part, inner, (*path, key), choice=choice, where=f"{short_name(key)} {choice.value}", outer=scope
            )

        for domain in candidates[: self.max_tries].tolist():
            tried += 1
            self.tries += 1
            mark = self.trial.mark()
            failure = enter(domain)
            if failure is None:
                if domain not in may_hold_all:
                    if fallback is None or (capacity[domain], domain) < (capacity[fallback], fallback):
                        return None  # the tightest of the domains that hold the minimum
                    self.trial.rollback(mark)
                    break
                if self._holds_all(part):
                    return None
                fallback = domain if fallback is None else fallback
                self.trial.rollback(mark)
                continue
            first_failure = first_failure or failure
        if fallback is not None:
            return enter(fallback)  # the same state as when it held the minimum: it holds it again
        assert first_failure is not None
        tightest = domains.label(int(candidates[0]))
        return _Failure(
            f"{part.label} needs {what} in one {key}; none of the {plural(tried, short_name(key))} "
            f"with room holds them together (in {short_name(key)} {tightest}, {first_failure.summary})",
            first_failure.shape,
        )

    def _candidates(
        self,
        part: _Part,
        domains: Domains,
        scope: Scope,
        key: str,
        *,
        what: str,
        ok: BoolArray,
        pods: IntArray,
        required: bool,
    ) -> IntArray | _Failure:
        """The domains of ``key`` whose bounds allow the part (only the one its members run in, if they run),
        or why none does (``what``: what the part needs, in words; the domains pruned are counted)."""
        pinned_domains = np.unique(domains.ids[part.pinned_nodes()])
        if len(pinned_domains) and (len(pinned_domains) > 1 or pinned_domains[0] < 0):
            if not required:
                return _Failure("members already run in several domains")
            spread = plural(len(pinned_domains), short_name(key))
            return _Failure(
                f"{part.label} already runs in {spread} or on nodes without {key}; it cannot be kept in one.",
                self._first_shape(part),
                unresolvable=True,
            )
        candidates = np.flatnonzero(ok)
        present = self._present(domains, scope)
        self.pruned += int(np.count_nonzero(present & ~ok))
        if len(pinned_domains):
            candidates = candidates[candidates == pinned_domains[0]]
        if not len(candidates) and len(pinned_domains):
            # Its members already run in one domain: only that domain's room matters to the user.
            domain = int(pinned_domains[0])
            return _Failure(
                f"{part.label} needs {what} in {key} {domains.label(domain)}, where its members run; "
                f"it fits {max(0, int(pods[domain]) - len(part.pinned_nodes()))} more.",
                self._first_shape(part),
            )
        if not len(candidates):
            never = self._never(part, domains, scope)
            return _Failure(
                f"{part.label} needs {what} in one {key}; {self._largest(part, domains, scope, pods)}{never}",
                self._first_shape(part),
                unresolvable=bool(never),
            )
        return candidates

    def _tightest_first(
        self, part: _Part, domains: Domains, candidates: IntArray, *, capacity: IntArray, pods: IntArray
    ) -> tuple[IntArray, set[int]]:
        """The candidates in the order they are tried, and those whose bound allows the whole of an elastic
        part."""
        # An elastic part goes to the tightest domain that holds all of it (minimums and extras); only when
        # none does, to the tightest that holds its minimum. Domains whose bound allows the whole part are
        # tried first, each with a trial of its extras; the first domain after them that holds the minimum
        # is the tightest of the rest. Inside a trial, nested parts choose by their minimum only, so that
        # the work stays within max_tries trials per part.
        elastic = part.elastic and not self._trialling
        whole = (pods[candidates] >= part.total) if elastic else np.zeros(len(candidates), dtype=np.bool_)
        may_hold_all = set(candidates[whole].tolist())
        # Tightest first; between domains with as much room, the most allocated (kube-scheduler's
        # MostAllocated), which keeps the emptier one whole for a later big gang.
        room = capacity[candidates] * 2 + whole  # the keys before the tie-break
        tied = len(np.unique(room)) < len(room)
        used = self._allocated(part, domains)[candidates] if tied else np.zeros(len(candidates))
        candidates = candidates[np.lexsort((candidates, -used, capacity[candidates], ~whole))]
        return candidates, may_hold_all

    def _inside(
        self,
        part: _Part,
        scope: Scope,
        path: tuple[str, ...],
        *,
        choice: DomainChoice | None,
        where: str,
        outer: Scope = None,
    ) -> _Failure | None:
        """Phase 3: the minimum of ``part`` within ``scope`` (already confined to its domain)."""
        mark = self.trial.mark()
        if part.request.is_leaf:
            failure = self._leaf_minimum(part, scope, where)
        else:
            failure = self._group_minimum(part, scope, path, where)
        if failure is not None:
            self.trial.rollback(mark)
            return failure
        previous = (part.satisfied, part.scope, part.outer, part.path, part.where, part.domain)
        part.satisfied, part.scope, part.outer, part.path, part.where, part.domain = (
            True,
            scope,
            outer,
            path,
            where,
            choice,
        )

        def undo() -> None:
            part.satisfied, part.scope, part.outer, part.path, part.where, part.domain = previous

        self.trial.record(undo)
        return None

    def _leaf_minimum(self, part: _Part, scope: Scope, where: str) -> _Failure | None:
        need = max(0, part.request.min_pods - len(part.pinned))
        waiting = sum(part.waiting(i) for i in range(len(part.shapes)))
        if need > waiting:
            exist = len(part.pinned) + waiting
            return _Failure(
                f"{part.label} needs {plural(part.request.min_pods, 'pod')} but only {exist} exist.",
                self._first_shape(part),
            )
        if need == 0:
            return None
        active = [i for i in range(len(part.shapes)) if part.waiting(i)]
        more = " more" if part.pinned else ""
        wanted = plural(need, "more pod" if part.pinned else "pod")
        if len(active) == 1:
            fit = self._fit(part.shapes[active[0]], scope)
            total = int(fit.sum())
            if total < need:
                # Name what limits each node, as kube-scheduler names the resource a node is short of.
                limit = node_limit(self.snapshot, part.shapes[active[0]]) if total else ""
                return _Failure(
                    f"{part.label} needs {wanted}; {where} fits {total}{': ' + limit if limit else ''}.",
                    part.shapes[active[0]],
                    summary=f"only {total} of its {need}{more} pods fit",
                )
            self._fill(part, active[0], scope, need, fit)
            return None
        mark = self.trial.mark()
        placed = 0
        for i in sorted(active, key=lambda i: -part.shapes[i].size):
            placed += self._fill(part, i, scope, min(need - placed, part.waiting(i)))
            if placed == need:
                return None
        self.trial.rollback(mark)
        if self._exact(part, scope, need):
            return None
        # The nodes' reasons are told for the shape with the least room for its pods: a shape whose node selector
        # matches no node is why, not the biggest shape, which may fit everywhere ("8/8 nodes are available").
        room = {i: int(self._fit(part.shapes[i], scope).sum()) / part.waiting(i) for i in active}
        limiting = min(active, key=lambda i: (room[i], -part.shapes[i].size))
        return _Failure(
            f"{part.label} needs {wanted} of {len(active)} shapes; {where} fits {placed} of them together.",
            part.shapes[limiting],
            summary=f"only {placed} of its {need}{more} pods fit together",
        )

    def _group_minimum(self, part: _Part, scope: Scope, path: tuple[str, ...], where: str) -> _Failure | None:
        request = part.request
        satisfied = 0
        failures: list[_Failure] = []
        for child in part.children:
            if satisfied >= request.min_children:
                break
            failure = self._satisfy(child, scope, path, where)
            if failure is None:
                satisfied += 1
            else:
                failures.append(failure)
        if satisfied < request.min_children:
            cause = failures[0]
            # Unresolvable only when too few children could ever fit, not because the first that failed cannot.
            resolvable = sum(1 for failure in failures if not failure.unresolvable)
            return _Failure(
                f"{part.label} needs {request.min_children} of its {plural(len(part.children), 'part')} "
                f"placed together; {satisfied} fit: {cause.text}",
                cause.shape,
                satisfied + resolvable < request.min_children,
                summary=f"only {satisfied} of its {len(part.children)} parts fit together: {cause.text}",
            )
        if request.min_pods:
            missing = self._top_up(part, request.min_pods - part.pod_count(), scope, path, where)
            if missing > 0:
                return _Failure(
                    f"{part.label} needs {plural(request.min_pods, 'pod')} across its parts; "
                    f"{request.min_pods - missing} fit.",
                    self._first_shape(part),
                    summary=f"only {request.min_pods - missing} of its {request.min_pods} pods fit",
                )
        return None

    def _top_up(self, part: _Part, missing: int, scope: Scope, path: tuple[str, ...], where: str) -> int:
        """Place up to ``missing`` more pods in the subtree (more children, then more pods); returns
        how many are still missing."""
        for child in part.children:
            if missing <= 0:
                break
            if not child.satisfied:
                before = child.pod_count()
                if self._satisfy(child, scope, path, where) is None:
                    missing -= child.pod_count() - before
        for child in part.children:
            if missing <= 0:
                break
            if child.satisfied:
                if child.request.is_leaf:
                    missing -= self._fill_extras(child, missing, child.scope)
                else:
                    missing = self._top_up(child, missing, child.scope, child.path, child.where)
        return missing

    def _extras(self, part: _Part, *, widen: bool = True) -> None:
        """Phase 4: whatever else fits, inside the domains each part already uses."""
        if part.request.is_leaf:
            self._fill_extras(part, None, part.scope)
            if widen and part.domain is not None and not part.domain.required and part.any_waiting():
                self._fill_extras(part, None, part.outer)  # a preference may widen for extras too
            return
        for child in part.children:
            if not child.satisfied:
                self._satisfy(child, part.scope, part.path, part.where)
        for child in part.children:
            if child.satisfied:
                self._extras(child, widen=widen)

    def _holds_all(self, part: _Part) -> bool:
        """Whether the domain ``part`` was just placed in also takes everything it wants beyond its
        minimum. A trial of phase 4 inside the domain, undone either way: extras are placed for real only
        once every minimum of the gang holds."""
        mark = self.trial.mark()
        self._trialling = True
        try:
            self._extras(part, widen=False)
            return _complete(part)
        finally:
            self._trialling = False
            self.trial.rollback(mark)

    # -- filling nodes -------------------------------------------------------------------------

    def _fit(self, shape: ShapeFit, scope: Scope) -> IntArray:
        fit = self.trial.fit(shape)
        return fit if scope is None else fit[scope]

    def _fill_extras(self, part: _Part, limit: int | None, scope: Scope) -> int:
        placed = 0
        for i in sorted(range(len(part.shapes)), key=lambda i: -part.shapes[i].size):
            want = part.waiting(i) if limit is None else min(part.waiting(i), limit - placed)
            if want > 0:
                placed += self._fill(part, i, scope, want)
        return placed

    def _fill(self, part: _Part, shape_index: int, scope: Scope, want: int, fit: IntArray | None = None) -> int:
        """Place up to ``want`` pending pods of one shape; returns how many were placed.

        Nodes are chosen down the topology (see :meth:`_fill_order`), and each node is filled before
        the next is opened.
        """
        shape = part.shapes[shape_index]
        if fit is None:
            fit = self._fit(shape, scope)
        positions = np.flatnonzero(fit)
        if not len(positions) or want <= 0:
            return 0
        copies = fit[positions]
        nodes = positions if scope is None else scope[positions]
        want = min(want, int(copies.sum()))
        order = self._fill_order(nodes, copies, shape, want)
        cumulative = np.cumsum(copies[order])
        last = int(np.searchsorted(cumulative, want))
        counts = copies[order[: last + 1]].copy()
        counts[-1] -= int(cumulative[last]) - want
        self._take(part, shape_index, nodes[order[: last + 1]], counts)
        return want

    def _fill_order(self, nodes: IntArray, copies: IntArray, shape: ShapeFit, want: int) -> IntArray:
        """Where ``want`` pods go among ``nodes`` (each holding ``copies``), as the order to fill them.

        Down the configured levels above the node, best fit at each: the tightest domain that holds
        them all; if none does, the roomiest domains whole until the rest fits into one, then the
        tightest that holds the rest. The gang spans as few racks and blocks as it can, and the domains
        it leaves are as whole as they can be, even when it asked for no topology at all. On the nodes
        of a domain: partly used nodes first, then the fewest free copies, then node index.
        """
        levels = self._fill_levels

        def order(chosen: IntArray, want: int, level: int) -> IntArray:
            if level == len(levels):
                fresh = copies[chosen] >= shape.empty_fit[nodes[chosen]]
                key = (fresh.astype(np.int64) << 62) | (copies[chosen] << 32) | chosen
                return chosen[np.argsort(key)]
            # Domain ids are dense (one past -1, a node without the label): a count per id, no sort of the
            # nodes (np.unique's sort was a third of a 3-pod gang's placement on 65,536 nodes).
            ids = levels[level][nodes[chosen]] + 1
            totals = np.bincount(ids, weights=copies[chosen]).astype(np.int64)
            if np.count_nonzero(totals) == 1:
                return order(chosen, want, level + 1)
            parts = [order(chosen[ids == domain], quota, level + 1) for domain, quota in _best_fit_split(totals, want)]
            return np.concatenate(parts)

        return order(np.arange(len(nodes)), want, 0)

    @property
    def _fill_levels(self) -> list[IdArray]:
        snapshot = self.snapshot
        return [snapshot.level_ids[i] for i, key in enumerate(snapshot.topology.levels) if key != HOSTNAME]

    def _take(self, part: _Part, shape_index: int, nodes: IntArray, counts: IntArray) -> None:
        """Take ``counts`` pods on ``nodes``: the members first (one entry each), then placeholders (one
        entry per fill, whatever their number)."""
        self.trial.take(part.shapes[shape_index], nodes, counts)
        pending = part.pending[shape_index]
        if not part.anonymous[shape_index]:  # members only (the common case): one entry each
            placed_members = [(pending.pop(), node, shape_index) for node in np.repeat(nodes, counts).tolist()]
            part.placed.extend(placed_members)

            def undo_members() -> None:
                del part.placed[-len(placed_members) :]
                pending.extend(pod for pod, _, _ in reversed(placed_members))

            self.trial.record(undo_members)
            return
        before = np.cumsum(counts) - counts
        for_members = np.clip(min(len(pending), int(counts.sum())) - before, 0, counts)
        for_placeholders = counts - for_members
        placed = [(pending.pop(), node, shape_index) for node in np.repeat(nodes, for_members).tolist()]
        part.placed.extend(placed)
        held = int(for_placeholders.sum())
        if held:
            used = for_placeholders > 0
            part.held.append((nodes[used], for_placeholders[used], shape_index))
            part.anonymous[shape_index] -= held
            part.held_count += held

        def undo() -> None:
            if placed:
                del part.placed[-len(placed) :]
                pending.extend(pod for pod, _, _ in reversed(placed))
            if held:
                part.held.pop()
                part.anonymous[shape_index] += held
                part.held_count -= held

        self.trial.record(undo)

    def _exact(self, part: _Part, scope: Scope, need: int) -> bool:
        """Settle a small several-shape leaf exhaustively (see ``topology.exact``)."""
        active = sorted((i for i in range(len(part.shapes)) if part.waiting(i)), key=lambda i: -part.shapes[i].size)
        if sum(part.waiting(i) for i in active) > exact.MAX_PODS:
            return False
        fits = [self._fit(part.shapes[i], scope) for i in active]
        positions = np.flatnonzero(np.logical_or.reduce([fit > 0 for fit in fits]))
        if len(positions) > exact.MAX_NODES:
            return False
        nodes = positions if scope is None else scope[positions]
        columns = np.unique(np.concatenate([part.shapes[i].columns for i in active]))
        demand = []
        for i in active:
            row = np.zeros(len(columns), dtype=np.int64)
            row[np.searchsorted(columns, part.shapes[i].columns)] = part.shapes[i].quotas
            demand.append(row.tolist())
        leaf = exact.SmallLeaf(
            free=self.trial.free[np.ix_(nodes, columns)].tolist(),
            demand=demand,
            # a shape asking for a resource no node offers fits nowhere, whatever its columns say
            allowed=[(part.shapes[i].eligibility.mask[nodes] & (not part.shapes[i].missing)).tolist() for i in active],
            pending=[part.waiting(i) for i in active],
        )
        solution = exact.solve(leaf, need)
        if solution is None:
            return False
        for slot, i in enumerate(active):
            chosen = [node for shape, node in solution if shape == slot]
            if chosen:
                where, counts = np.unique(np.asarray(chosen, dtype=np.int64), return_counts=True)
                self._take(part, i, nodes[where], counts.astype(np.int64))
        return True

    # -- phase 1: bounds -----------------------------------------------------------------------

    def _bounds(self, part: _Part, domains: Domains, scope: Scope) -> tuple[BoolArray, IntArray, IntArray]:
        """Per domain: can the part's minimum possibly fit, a capacity for best-fit ordering, and
        the most pods of the part that could be there. Necessary conditions only."""
        memo: dict[tuple[int, tuple[str, ...]], IntArray] = {}
        return self._bound(part, domains, scope, memo)

    def _bound(
        self, part: _Part, domains: Domains, scope: Scope, memo: dict[tuple[int, tuple[str, ...]], IntArray]
    ) -> tuple[BoolArray, IntArray, IntArray]:
        request = part.request
        if request.required is not None and request.required not in domains.path:
            finer = self.snapshot.domains((*domains.path, request.required))
            ok, capacity, pods = self._bound_here(part, finer, scope, memo)
            return (
                _any_by(finer.parent, ok, domains.n_domains),
                _max_by(finer.parent, np.where(ok, capacity, 0), domains.n_domains),
                _max_by(finer.parent, pods, domains.n_domains),
            )
        return self._bound_here(part, domains, scope, memo)

    def _bound_here(
        self, part: _Part, domains: Domains, scope: Scope, memo: dict[tuple[int, tuple[str, ...]], IntArray]
    ) -> tuple[BoolArray, IntArray, IntArray]:
        n_domains = domains.n_domains
        request = part.request
        if request.is_leaf:
            capacity = np.zeros(n_domains, dtype=np.int64)
            pods = np.zeros(n_domains, dtype=np.int64)
            for i, shape in enumerate(part.shapes):
                waiting = part.waiting(i)
                if not waiting:
                    continue
                totals = memo.get((id(shape), domains.path))
                if totals is None:
                    ids = domains.ids if scope is None else domains.ids[scope]
                    totals = memo[(id(shape), domains.path)] = domain_totals(ids, self._fit(shape, scope), n_domains)
                capacity += totals
                pods += np.minimum(totals, waiting)
            need = max(0, request.min_pods - len(part.pinned))
            return pods >= need, capacity, pods + len(part.pinned)
        satisfiable = np.zeros(n_domains, dtype=np.int64)
        capacity = np.zeros(n_domains, dtype=np.int64)
        pods = np.zeros(n_domains, dtype=np.int64)
        for child in part.children:
            child_ok, child_capacity, child_pods = self._bound(child, domains, scope, memo)
            satisfiable += child_ok
            capacity += child_capacity
            pods += child_pods
        return (satisfiable >= request.min_children) & (pods >= request.min_pods), capacity, pods

    def _largest(self, part: _Part, domains: Domains, scope: Scope, pods: IntArray) -> str:
        """How close the roomiest domain comes, for the message of a part no domain can hold."""
        short = short_name(domains.path[-1])
        if part.request.is_leaf:
            return f"the largest {short} fits {int(pods.max())}{self._free_devices(part, domains, scope, pods)}."
        shape = self._first_shape(part)
        room = 0
        if shape is not None:
            ids = domains.ids if scope is None else domains.ids[scope]
            room = int(domain_totals(ids, self._fit(shape, scope), domains.n_domains).max())
        return (
            f"no {short} has room for them together "
            f"(they need at least {_minimum_pods(part)} pods; the largest {short} fits {room})."
        )

    def _free_devices(self, part: _Part, domains: Domains, scope: Scope, pods: IntArray) -> str:
        """`` (it has 18 devices of class gpu.nvidia.com free)``: the devices free in the roomiest domain, on
        nodes the part may use, when its pods claim devices."""
        names = self.snapshot.resources
        if len(part.shapes) != 1 or not len(pods):
            return ""
        shape = part.shapes[0]
        ids = domains.ids if scope is None else domains.ids[scope]
        usable = shape.eligibility.mask if scope is None else shape.eligibility.mask[scope]
        free = self.snapshot.free if scope is None else self.snapshot.free[scope]
        roomiest = int(np.argmax(pods))
        found = [
            amount_words(int(domain_totals(ids, np.where(usable, free[:, column], 0), domains.n_domains)[roomiest]),
                         names[column]) + " free"
            for column in shape.columns.tolist()
            if counts_devices(names[column])
        ]
        return f" (it has {', '.join(found)})" if found else ""

    def _allocated(self, part: _Part, domains: Domains) -> FloatArray:
        """Per domain, the share of its allocatable in use, averaged over the resources the part asks for.
        Over the whole cluster: a domain lies whole inside any scope that holds it. Kept until a pod is
        counted or forgotten (the allocatable per domain until allocatable changes): asked only to break
        ties, it costs one reduction per resource after each placement, not one per gang tried."""
        columns = tuple(
            sorted({int(column) for leaf in part.leaves() for shape in leaf.shapes for column in shape.columns})
        )
        if not columns:
            return np.zeros(domains.n_domains)
        snapshot, n, ids = self.snapshot, domains.n_domains, domains.ids + 1  # id 0: nodes outside every domain

        def per_domain(matrix: IntArray, column: int) -> FloatArray:
            sums: FloatArray = np.bincount(ids, weights=matrix[:, column], minlength=n + 1).astype(np.float64)
            return sums[1:]

        def allocatable(column: int) -> FloatArray:
            key = ("allocatable-by-domain", domains.path, column)
            return snapshot.cached_capacity(key, lambda: per_domain(snapshot.allocatable, column))

        def shares() -> FloatArray:
            total: FloatArray = np.zeros(n)
            for column in columns:
                total += per_domain(snapshot.requested, column) / np.maximum(allocatable(column), 1)
            return total / len(columns)

        return snapshot.cached_usage(("allocated-share", domains.path, columns), shares)

    def _never(self, part: _Part, domains: Domains, scope: Scope) -> str:
        """For a leaf no domain holds now: the sentence saying no domain could hold it even empty (so that
        only new nodes help), or empty when one could."""
        if not part.request.is_leaf:
            return ""
        ids = domains.ids if scope is None else domains.ids[scope]
        most = np.zeros(domains.n_domains, dtype=np.int64)
        for i, shape in enumerate(part.shapes):
            empty = shape.empty_fit if scope is None else shape.empty_fit[scope]
            most += np.minimum(domain_totals(ids, empty, domains.n_domains), part.waiting(i))
        need = max(0, part.request.min_pods - len(part.pinned))
        if not len(most) or int(most.max()) >= need:
            return ""
        short = short_name(domains.path[-1])
        return f" No {short} could hold it even if it were empty (the largest holds {int(most.max())})."

    def _present(self, domains: Domains, scope: Scope) -> BoolArray:
        ids = domains.ids if scope is None else domains.ids[scope]
        ids = ids[ids >= 0]
        return np.bincount(ids, minlength=domains.n_domains) > 0

    # -- results -------------------------------------------------------------------------------

    def _what(self, part: _Part) -> str:
        if part.request.is_leaf:
            need = max(0, part.request.min_pods - len(part.pinned))
            pods = plural(need, "more pod" if part.pinned else "pod")
            return pods + (devices_wanted(part.shapes[0].shape, need) if len(part.shapes) == 1 else "")
        return f"{part.request.min_children} of its {plural(len(part.children), 'part')}"

    def _first_shape(self, part: _Part) -> ShapeFit | None:
        for leaf in part.leaves():
            if leaf.shapes:
                return max(leaf.shapes, key=lambda shape: shape.size)
        return None

    def _infeasible(self, failure: _Failure) -> Infeasible:
        shape = failure.shape or self._first_shape(self.root)
        reasons: tuple[tuple[str, int], ...] = ()
        available = self.snapshot.n_nodes
        if shape is not None:
            reasons, available = node_reasons(self.snapshot, shape)
        return Infeasible(
            gang=self.root.request.key,
            reason=failure.text,
            node_reasons=reasons,
            available=available,
            total=self.snapshot.n_nodes,
            tries=self.tries,
            pruned=self.pruned,
            unresolvable=failure.unresolvable,
        )

    def _placement(self) -> Placement:
        names = self.snapshot.names
        assignments: list[Assignment] = []
        held: list[HeldRoom] = []
        domains: list[DomainChoice] = []
        unplaced: list[str] = []
        stack = [self.root]
        while stack:
            part = stack.pop()
            if part.domain is not None and part.satisfied:
                domains.append(part.domain)
            for pod, node, shape_index in part.placed:
                assignments.append(Assignment(pod=pod, node=names[node], shape=part.shapes[shape_index].shape))
            for nodes, counts, shape_index in part.held:
                shape = part.shapes[shape_index].shape
                held += [
                    HeldRoom(part=part.request.key, node=names[node], shape=shape, count=count)
                    for node, count in zip(nodes.tolist(), counts.tolist(), strict=True)
                ]
            for keys in part.pending:
                unplaced.extend(reversed(keys))
            stack.extend(reversed(part.children))
        return Placement(
            gang=self.root.request.key,
            assignments=tuple(assignments),
            held=tuple(held),
            domains=tuple(domains),
            unplaced=tuple(unplaced),
            tries=self.tries,
            pruned=self.pruned,
        )


def _complete(part: _Part) -> bool:
    """Whether every member and every child of ``part`` is placed."""
    if part.request.is_leaf:
        return not part.any_waiting()
    return all(child.satisfied and _complete(child) for child in part.children)


def _minimum_pods(part: _Part) -> int:
    """The fewest new pods that can satisfy ``part``."""
    if part.request.is_leaf:
        return max(0, part.request.min_pods - len(part.pinned))
    smallest = sorted(_minimum_pods(child) for child in part.children)[: part.request.min_children]
    return max(sum(smallest), part.request.min_pods - len(part.pinned_nodes()))


def _any_by(parent: IdArray, flags: BoolArray, n_groups: int) -> BoolArray:
    result = np.zeros(n_groups, dtype=np.bool_)
    result[parent[flags]] = True
    return result


def _max_by(parent: IdArray, values: IntArray, n_groups: int) -> IntArray:
    result = np.zeros(n_groups, dtype=np.int64)
    np.maximum.at(result, parent, values)
    return result


def _best_fit_split(totals: IntArray, want: int) -> list[tuple[int, int]]:
    """Domains (indices into ``totals``) and how many pods each takes, for ``want`` pods in all.

    The tightest domain that holds them all; else the roomiest, whole, until the rest fits into one,
    and then the tightest that holds the rest. Ties go to the lower index. ``totals`` holds ``want``.
    """
    index = np.arange(len(totals))
    holds = np.flatnonzero(totals >= want)
    if len(holds):
        return [(int(holds[np.lexsort((holds, totals[holds]))[0]]), want)]
    split: list[tuple[int, int]] = []
    remaining = want
    for domain in np.lexsort((index, -totals)).tolist():
        if remaining <= 0:
            break
        rest = np.flatnonzero((totals >= remaining) & ~np.isin(index, [d for d, _ in split]))
        if len(rest):
            split.append((int(rest[np.lexsort((rest, totals[rest]))[0]]), remaining))
            return split
        take = int(min(totals[domain], remaining))
        if take:
            split.append((domain, take))
            remaining -= take
    return split
